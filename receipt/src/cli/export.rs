//! Reading an exported stream (`receipt verify --file`): JSON lines, each `{"receipt": …}` (a
//! receipt in its wire form: id, ts, stream, prev, body, context, hash) or `{"checkpoint": …}`
//! (a signed head), as `rebuno export` writes an execution's event log. One format for an
//! audit of either model, checked with nothing but the file and the public key.

use crate::Receipt;
use crate::signing::SignedHead;
use std::io::{BufRead, Read};
use std::path::Path;

/// The longest line read (one receipt and its body).
const LINE_MAX: u64 = 16 * 1024 * 1024;

/// An exported stream, as read.
pub(super) struct Export {
    /// The stream every receipt names.
    pub(super) stream: String,
    /// Its receipts, in file order (their hashes are checked by verification, not here).
    pub(super) receipts: Vec<Receipt>,
    /// Its signed checkpoints.
    pub(super) checkpoints: Vec<SignedHead>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
enum Line {
    #[serde(rename = "receipt")]
    Receipt(Box<Receipt>),
    #[serde(rename = "checkpoint")]
    Checkpoint(SignedHead),
}

/// Reads the export at `path`; `expected`, when given, is the stream it must hold.
pub(super) fn read(path: &Path, expected: Option<&str>) -> Result<Export, String> {
    let file = std::fs::File::open(path).map_err(|e| e.to_string())?;
    let mut reader = std::io::BufReader::new(file);
    let mut export = Export {
        stream: String::new(),
        receipts: Vec::new(),
        checkpoints: Vec::new(),
    };
    let mut line = String::new();
    for number in 1.. {
        line.clear();
        let n = (&mut reader)
            .take(LINE_MAX + 1)
            .read_line(&mut line)
            .map_err(|e| format!("line {number}: {e}"))?;
        if n == 0 {
            break;
        }
        if n as u64 > LINE_MAX {
            return Err(format!("line {number} is longer than {LINE_MAX} bytes"));
        }
        if line.trim().is_empty() {
            continue;
        }
        let parsed: Line = serde_json::from_str(&line).map_err(|e| {
            format!("line {number} is neither {{\"receipt\": …}} nor {{\"checkpoint\": …}}: {e}")
        })?;
        match parsed {
            Line::Receipt(r) => {
                if export.receipts.is_empty() {
                    export.stream = r.stream().to_owned();
                } else if r.stream() != export.stream {
                    return Err(format!(
                        "line {number}: a receipt of stream {:?} in an export of {:?}",
                        r.stream(),
                        export.stream
                    ));
                }
                export.receipts.push(*r);
            }
            Line::Checkpoint(c) => export.checkpoints.push(c),
        }
    }
    if export.receipts.is_empty() {
        return Err("it holds no receipt".into());
    }
    if let Some(expected) = expected
        && expected != export.stream
    {
        return Err(format!(
            "it holds stream {:?}, not {expected:?}",
            export.stream
        ));
    }
    Ok(export)
}
