//! Target globs with Go `path.Match` semantics, written from the algorithm's description.
//!
//! * `*` matches any run of non-`/` characters; `?` matches one non-`/` character.
//! * `[...]` is a class of characters and ranges (`[a-z0-9]`); `^` right after `[` negates it.
//!   `!` does **not** negate (Go semantics): `[!a]` is the class `{'!', 'a'}`.
//! * `\` escapes the next character, inside and outside classes.
//! * A malformed pattern is [`BadPattern`] (Go's `ErrBadPattern`): an unclosed or empty class,
//!   a range with a missing end, an unescaped `-` or `]` where a class character is due, or a
//!   trailing `\`. The matcher reports it however far the match got, so [`validate_glob`] gives
//!   the same verdict as any match attempt would.
//!
//! Matching walks bytes the way Go does; classes and `?` decode one UTF-8 character.

/// The pattern is malformed (Go's `path.ErrBadPattern`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("syntax error in pattern")]
pub struct BadPattern;

/// Reports whether `name` matches the whole of `pattern`, or [`BadPattern`] if the pattern is
/// malformed.
pub fn glob_match(pattern: &str, name: &str) -> Result<bool, BadPattern> {
    let mut pattern = pattern.as_bytes();
    let mut name = name.as_bytes();
    'pattern: while !pattern.is_empty() {
        let (star, chunk, rest) = scan_chunk(pattern);
        pattern = rest;
        if star && chunk.is_empty() {
            // A trailing star matches the rest of the name unless it crosses a '/'.
            return Ok(!name.contains(&b'/'));
        }
        // Try the chunk at the current position; if it is the last chunk it must consume all.
        if let Some(t) = match_chunk(chunk, name)?
            && (t.is_empty() || !pattern.is_empty())
        {
            name = t;
            continue;
        }
        if star {
            // Let the star swallow one more byte at a time, never a '/'.
            let mut i = 0;
            while i < name.len() && name[i] != b'/' {
                if let Some(t) = match_chunk(chunk, &name[i + 1..])? {
                    if pattern.is_empty() && !t.is_empty() {
                        i += 1;
                        continue;
                    }
                    name = t;
                    continue 'pattern;
                }
                i += 1;
            }
        }
        // No match; still report a malformed remainder, as Go does.
        validate_chunks(pattern)?;
        return Ok(false);
    }
    Ok(name.is_empty())
}

/// Checks a pattern's syntax without matching anything: `Err(BadPattern)` exactly when
/// [`glob_match`] would report it for some name.
pub fn validate_glob(pattern: &str) -> Result<(), BadPattern> {
    validate_chunks(pattern.as_bytes())
}

fn validate_chunks(mut pattern: &[u8]) -> Result<(), BadPattern> {
    while !pattern.is_empty() {
        let (_, chunk, rest) = scan_chunk(pattern);
        pattern = rest;
        match_chunk(chunk, b"")?;
    }
    Ok(())
}

/// Splits off the leading stars (reported as `star`) and the chunk up to the next star that is
/// not inside a class.
fn scan_chunk(pattern: &[u8]) -> (bool, &[u8], &[u8]) {
    let mut p = pattern;
    let mut star = false;
    while let [b'*', rest @ ..] = p {
        p = rest;
        star = true;
    }
    let mut in_range = false;
    let mut i = 0;
    while i < p.len() {
        match p[i] {
            // A trailing backslash is left for match_chunk to reject.
            b'\\' if i + 1 < p.len() => i += 1,
            b'[' => in_range = true,
            b']' => in_range = false,
            b'*' if !in_range => break,
            _ => {}
        }
        i += 1;
    }
    (star, &p[..i], &p[i..])
}

/// Decodes one character like Go's `utf8.DecodeRune`: invalid bytes give U+FFFD of length 1,
/// empty input gives U+FFFD of length 0.
fn decode_rune(s: &[u8]) -> (char, usize) {
    if let Some(chunk) = s.utf8_chunks().next() {
        if let Some(c) = chunk.valid().chars().next() {
            return (c, c.len_utf8());
        }
        if !chunk.invalid().is_empty() {
            return (char::REPLACEMENT_CHARACTER, 1);
        }
    }
    (char::REPLACEMENT_CHARACTER, 0)
}

/// Matches one star-free chunk against the start of `s`. `Ok(Some(rest))` on a match,
/// `Ok(None)` on a mismatch. After a mismatch the rest of the chunk is still parsed so that a
/// malformed chunk is always reported.
fn match_chunk<'a>(mut chunk: &[u8], mut s: &'a [u8]) -> Result<Option<&'a [u8]>, BadPattern> {
    let mut failed = false;
    while let Some(&head) = chunk.first() {
        if !failed && s.is_empty() {
            failed = true;
        }
        match head {
            b'[' => {
                let mut r = '\0';
                if !failed {
                    let (c, n) = decode_rune(s);
                    r = c;
                    s = &s[n..];
                }
                chunk = &chunk[1..];
                let negated = chunk.first() == Some(&b'^');
                if negated {
                    chunk = &chunk[1..];
                }
                let mut matched = false;
                let mut ranges = 0;
                loop {
                    if chunk.first() == Some(&b']') && ranges > 0 {
                        chunk = &chunk[1..];
                        break;
                    }
                    let (lo, rest) = class_char(chunk)?;
                    chunk = rest;
                    let mut hi = lo;
                    if let [b'-', rest @ ..] = chunk {
                        let (h, rest) = class_char(rest)?;
                        hi = h;
                        chunk = rest;
                    }
                    if lo <= r && r <= hi {
                        matched = true;
                    }
                    ranges += 1;
                }
                if matched == negated {
                    failed = true;
                }
            }
            b'?' => {
                if !failed {
                    if s.first() == Some(&b'/') {
                        failed = true;
                    }
                    let (_, n) = decode_rune(s);
                    s = &s[n..];
                }
                chunk = &chunk[1..];
            }
            _ => {
                let literal = if head == b'\\' {
                    chunk = &chunk[1..];
                    *chunk.first().ok_or(BadPattern)?
                } else {
                    head
                };
                if !failed {
                    if s.first() != Some(&literal) {
                        failed = true;
                    }
                    s = s.get(1..).unwrap_or_default();
                }
                chunk = &chunk[1..];
            }
        }
    }
    Ok(if failed { None } else { Some(s) })
}

/// Reads one (possibly escaped) class character. The class must continue after it, and the
/// character may not be an unescaped `-` or `]`.
fn class_char(chunk: &[u8]) -> Result<(char, &[u8]), BadPattern> {
    let mut c = match chunk.first() {
        None | Some(b'-') | Some(b']') => return Err(BadPattern),
        Some(_) => chunk,
    };
    if c[0] == b'\\' {
        c = &c[1..];
        if c.is_empty() {
            return Err(BadPattern);
        }
    }
    let (r, n) = decode_rune(c);
    if r == char::REPLACEMENT_CHARACTER && n == 1 {
        return Err(BadPattern);
    }
    let rest = &c[n..];
    if rest.is_empty() {
        return Err(BadPattern);
    }
    Ok((r, rest))
}
