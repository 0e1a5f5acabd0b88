//! Ed25519 keys for tamper evidence, shared by both models: generating a key pair into files,
//! loading a signing key from a file (or from an environment variable that names one), loading
//! a public key, and the signed head both models record and an auditor checks.
//!
//! Files are text, one line each: a signing key file holds `ed25519-secret:<64 hex digits>`
//! (the 32-byte seed) and is written with mode 0600; its public key file (`<KEYFILE>.pub`)
//! holds `ed25519:<64 hex digits>`. A key's id is `ed25519:` and the first 16 hex digits of
//! the SHA-256 of its public key: short enough to record with every head, long enough that two
//! keys of one deployment never share one.
//!
//! A [`SignedHead`] says "stream `stream` had `length` entries ending in hash `head` at `at`",
//! signed over a domain-separated canonical form ([`SignedHead::message`]), so a signature made
//! for one purpose can never be replayed as another.
//!
//! Keys come from files or from environment variables naming a file, never from command-line
//! values (which other users of the machine can read in the process list).

use ed25519_dalek::{Signer, Verifier};
use sha2::{Digest, Sha256};
use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};

/// The prefix of a signing key file's line.
const SECRET_PREFIX: &str = "ed25519-secret:";
/// The prefix of a public key file's line, and of a key id.
const PUBLIC_PREFIX: &str = "ed25519:";
/// The domain tag a signed head's message starts with.
const HEAD_DOMAIN: &str = "durable-agents/signed-head/v1";

/// The domain tag of a batch of heads signed together (see [`HeadProof`]).
const BATCH_DOMAIN: &str = "durable-agents/signed-heads/v2";
/// The largest key file read (a key line is under 100 bytes; anything larger is not a key).
const KEY_FILE_MAX: u64 = 4096;

/// Why a key could not be made, read or used. Every variant names the file it is about.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// The file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What the operating system said.
        source: std::io::Error,
    },
    /// The file exists and keygen does not overwrite keys.
    #[error("{path}: already exists; keygen never overwrites a key (move it away first)")]
    Exists {
        /// The file.
        path: PathBuf,
    },
    /// The file does not hold a key of the expected kind.
    #[error("{path}: {why}")]
    Malformed {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        why: String,
    },
    /// A signing key file that other users may read.
    #[error(
        "{path}: a signing key must be readable by its owner only (mode {mode:o}; run chmod 600)"
    )]
    Exposed {
        /// The file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// The operating system gave no randomness.
    #[error("no randomness for a new key: {0}")]
    Random(String),
}

/// A signing key with its id.
pub struct SigningKey {
    key: ed25519_dalek::SigningKey,
    id: String,
}

impl fmt::Debug for SigningKey {
    /// Shows the id only: a signing key never reaches a log.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SigningKey").field("id", &self.id).finish()
    }
}

/// A public key with its id.
#[derive(Clone, PartialEq, Eq)]
pub struct PublicKey {
    key: ed25519_dalek::VerifyingKey,
    id: String,
}

impl fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PublicKey").field("id", &self.id).finish()
    }
}

/// The id of a public key: `ed25519:` and the first 16 hex digits of its SHA-256.
fn key_id(public: &ed25519_dalek::VerifyingKey) -> String {
    let digest = Sha256::digest(public.as_bytes());
    format!("{PUBLIC_PREFIX}{}", hex(&digest[..8]))
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

/// The 32 bytes of 64 lowercase or uppercase hex digits.
fn unhex32(text: &str) -> Option<[u8; 32]> {
    let b = text.as_bytes();
    if b.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, pair) in b.chunks(2).enumerate() {
        let digit = |c: u8| (c as char).to_digit(16);
        out[i] = (digit(pair[0])? * 16 + digit(pair[1])?) as u8;
    }
    Some(out)
}

/// The one line of a key file, read with a size bound.
fn read_line(path: &Path) -> Result<String, KeyError> {
    use std::io::Read;
    let io = |source| KeyError::Io {
        path: path.to_owned(),
        source,
    };
    let mut text = String::new();
    std::fs::File::open(path)
        .map_err(io)?
        .take(KEY_FILE_MAX + 1)
        .read_to_string(&mut text)
        .map_err(io)?;
    if text.len() as u64 > KEY_FILE_MAX {
        return Err(KeyError::Malformed {
            path: path.to_owned(),
            why: "too large to be a key file".into(),
        });
    }
    Ok(text.trim().to_owned())
}

/// The public key file that goes with signing key file `path`: `<path>.pub`.
pub fn public_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".pub");
    PathBuf::from(name)
}

impl SigningKey {
    /// A new key from the operating system's randomness.
    pub fn generate() -> Result<Self, KeyError> {
        let mut seed = [0u8; 32];
        getrandom::fill(&mut seed).map_err(|e| KeyError::Random(e.to_string()))?;
        Ok(Self::from_seed(seed))
    }

    fn from_seed(seed: [u8; 32]) -> Self {
        let key = ed25519_dalek::SigningKey::from_bytes(&seed);
        let id = key_id(&key.verifying_key());
        SigningKey { key, id }
    }

    /// Writes this key to `path` (mode 0600, created new) and its public key to
    /// `<path>.pub`; refuses when either exists.
    pub fn write(&self, path: &Path) -> Result<PathBuf, KeyError> {
        let public = public_path(path);
        for p in [path, public.as_path()] {
            if p.exists() {
                return Err(KeyError::Exists { path: p.to_owned() });
            }
        }
        let secret_line = format!("{SECRET_PREFIX}{}\n", hex(self.key.as_bytes()));
        write_new(path, secret_line.as_bytes(), 0o600)?;
        let public_line = format!("{}\n", self.public().to_line());
        write_new(&public, public_line.as_bytes(), 0o644)?;
        Ok(public)
    }

    /// Reads a signing key file. Refused when it does not hold one, and on Unix when users
    /// other than its owner may read it.
    pub fn read(path: &Path) -> Result<Self, KeyError> {
        let line = read_line(path)?;
        let malformed = |why: &str| KeyError::Malformed {
            path: path.to_owned(),
            why: why.to_owned(),
        };
        if line.starts_with(PUBLIC_PREFIX) {
            return Err(malformed(
                "holds a public key; a signing key file starts with `ed25519-secret:`",
            ));
        }
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let meta = std::fs::metadata(path).map_err(|source| KeyError::Io {
                path: path.to_owned(),
                source,
            })?;
            let mode = meta.permissions().mode() & 0o777;
            if mode & 0o077 != 0 {
                return Err(KeyError::Exposed {
                    path: path.to_owned(),
                    mode,
                });
            }
        }
        let hex = line
            .strip_prefix(SECRET_PREFIX)
            .ok_or_else(|| malformed("not a signing key file (no `ed25519-secret:` line)"))?;
        let seed = unhex32(hex).ok_or_else(|| malformed("the key is not 64 hex digits"))?;
        Ok(Self::from_seed(seed))
    }

    /// The signing key file named by environment variable `var`, if it is set and not empty.
    pub fn from_env(var: &str) -> Result<Option<Self>, KeyError> {
        match std::env::var_os(var) {
            Some(path) if !path.is_empty() => Self::read(Path::new(&path)).map(Some),
            _ => Ok(None),
        }
    }

    /// This key's id (`ed25519:` and 16 hex digits).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Its public key.
    pub fn public(&self) -> PublicKey {
        PublicKey {
            key: self.key.verifying_key(),
            id: self.id.clone(),
        }
    }

    /// Signs `stream`'s head: `length` entries ending in hash `head`, at `at`.
    pub fn sign_head(&self, stream: &str, length: u64, head: &str, at: &str) -> SignedHead {
        let mut signed = self.unsigned(stream, length, head, at);
        signed.signature = hex(&self.key.sign(&signed.message()).to_bytes());
        signed
    }

    /// Signs several heads `(stream, length, head, at)` with one signature (a writer that
    /// commits many streams at once pays for one): each answer carries the [`HeadProof`] that
    /// ties it to the signed root. One head is signed as [`SigningKey::sign_head`] signs it.
    pub fn sign_heads(&self, heads: &[(&str, u64, &str, &str)]) -> Vec<SignedHead> {
        if let [(stream, length, head, at)] = heads {
            return vec![self.sign_head(stream, *length, head, at)];
        }
        let mut signed: Vec<SignedHead> = heads
            .iter()
            .map(|(stream, length, head, at)| self.unsigned(stream, *length, head, at))
            .collect();
        let leaves: Vec<[u8; 32]> = signed.iter().map(|h| leaf_hash(&h.message())).collect();
        let levels = merkle_levels(leaves);
        let root = levels
            .last()
            .and_then(|l| l.first())
            .copied()
            .unwrap_or([0; 32]);
        let count = signed.len() as u64;
        let signature = hex(&self
            .key
            .sign(&batch_message(&root, count, &self.id))
            .to_bytes());
        for (index, head) in signed.iter_mut().enumerate() {
            head.signature = signature.clone();
            head.proof = Some(HeadProof {
                index: index as u64,
                count,
                path: merkle_path(&levels, index).iter().map(|h| hex(h)).collect(),
            });
        }
        signed
    }

    /// A head with no signature yet.
    fn unsigned(&self, stream: &str, length: u64, head: &str, at: &str) -> SignedHead {
        SignedHead {
            stream: stream.to_owned(),
            length,
            head: head.to_owned(),
            at: at.to_owned(),
            key_id: self.id.clone(),
            signature: String::new(),
            proof: None,
        }
    }
}

/// Where a head sits among the heads signed with it ([`SigningKey::sign_heads`]): its position,
/// how many there were, and the sibling hashes from its leaf up to the root. The leaves are
/// SHA-256 of `0x00` and each head's [`SignedHead::message`]; a node is SHA-256 of `0x01`, its
/// left and its right child; a level's last node without a sibling moves up unchanged. The
/// signature covers the JSON array of a domain tag (`durable-agents/signed-heads/v2`), the root
/// in hex, the count and the key id.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HeadProof {
    /// The head's position among them, from 0.
    pub index: u64,
    /// How many heads were signed together.
    pub count: u64,
    /// Sibling hashes (64 hex digits each), from the leaf's level up.
    pub path: Vec<String>,
}

/// A signed head as a store keeps it on the entry it names: the fields beyond the stream and
/// length the entry's row gives.
#[derive(serde::Serialize, serde::Deserialize)]
struct StoredHead {
    head: String,
    at: String,
    key_id: String,
    signature: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    proof: Option<HeadProof>,
}

impl SignedHead {
    /// The head as a store keeps it on the entry it names (JSON: `head`, `at`, `key_id`,
    /// `signature`, `proof`; the stream and length are the entry's).
    pub fn stored_text(&self) -> String {
        serde_json::to_string(&StoredHead {
            head: self.head.clone(),
            at: self.at.clone(),
            key_id: self.key_id.clone(),
            signature: self.signature.clone(),
            proof: self.proof.clone(),
        })
        .expect("a head serializes")
    }

    /// A head read back from [`SignedHead::stored_text`] on the entry at `length` of `stream`.
    /// Text that is not one (a row edited by hand) reads as a head whose signature fails, so
    /// it is reported rather than skipped.
    pub fn from_stored(stream: String, length: u64, text: &str) -> SignedHead {
        let stored: StoredHead = serde_json::from_str(text).unwrap_or(StoredHead {
            head: String::new(),
            at: String::new(),
            key_id: String::new(),
            signature: String::new(),
            proof: None,
        });
        SignedHead {
            stream,
            length,
            head: stored.head,
            at: stored.at,
            key_id: stored.key_id,
            signature: stored.signature,
            proof: stored.proof,
        }
    }
}

impl HeadProof {
    /// The proof as a store keeps it: JSON text.
    pub fn to_text(&self) -> String {
        serde_json::to_string(self).expect("a proof serializes")
    }

    /// A stored proof read back. Text that is not a proof (a row edited by hand) reads as one
    /// that verifies nothing, so its head is reported rather than skipped.
    pub fn from_stored(text: &str) -> HeadProof {
        serde_json::from_str(text).unwrap_or(HeadProof {
            index: 0,
            count: 0,
            path: Vec::new(),
        })
    }
}

/// The leaf hash of a head's message.
fn leaf_hash(message: &[u8]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update([0u8]);
    h.update(message);
    h.finalize().into()
}

/// The parent of two nodes.
fn node_hash(left: &[u8; 32], right: &[u8; 32]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update([1u8]);
    h.update(left);
    h.update(right);
    h.finalize().into()
}

/// Every level of the tree over `leaves`, the leaves first, the root last.
fn merkle_levels(leaves: Vec<[u8; 32]>) -> Vec<Vec<[u8; 32]>> {
    let mut levels = vec![leaves];
    while levels.last().is_some_and(|l| l.len() > 1) {
        let below = levels.last().expect("a level");
        let up = below
            .chunks(2)
            .map(|pair| match pair {
                [l, r] => node_hash(l, r),
                [only] => *only,
                _ => unreachable!("chunks of two"),
            })
            .collect();
        levels.push(up);
    }
    levels
}

/// The sibling hashes of leaf `index`, from its level up.
fn merkle_path(levels: &[Vec<[u8; 32]>], mut index: usize) -> Vec<[u8; 32]> {
    let mut path = Vec::new();
    for level in &levels[..levels.len().saturating_sub(1)] {
        let sibling = index ^ 1;
        if sibling < level.len() {
            path.push(level[sibling]);
        }
        index /= 2;
    }
    path
}

/// The root a leaf's proof leads to, if the proof has the shape its index and count imply.
fn merkle_root(leaf: [u8; 32], proof: &HeadProof) -> Option<[u8; 32]> {
    if proof.count < 2 || proof.index >= proof.count {
        return None;
    }
    let (mut index, mut width) = (proof.index, proof.count);
    let mut path = proof.path.iter();
    let mut node = leaf;
    while width > 1 {
        let sibling = index ^ 1;
        if sibling < width {
            let hash = unhex32(path.next()?)?;
            node = if index % 2 == 0 {
                node_hash(&node, &hash)
            } else {
                node_hash(&hash, &node)
            };
        }
        index /= 2;
        width = width.div_ceil(2);
    }
    path.next().is_none().then_some(node)
}

/// The bytes a batch's signature covers.
fn batch_message(root: &[u8; 32], count: u64, key_id: &str) -> Vec<u8> {
    serde_json::to_vec(&(BATCH_DOMAIN, hex(root), count, key_id))
        .expect("strings and an integer serialize")
}

/// The `keygen` command of both CLIs: a new key written to `path` and `<path>.pub` (see
/// [`SigningKey::write`]); answers the line the command prints, a JSON object with the key's
/// id and both files.
pub fn keygen(path: &Path) -> Result<String, KeyError> {
    let key = SigningKey::generate()?;
    let public = key.write(path)?;
    Ok(serde_json::json!({
        "key_id": key.id(),
        "signing_key": path.display().to_string(),
        "public_key": public.display().to_string(),
    })
    .to_string())
}

/// Creates `path` (failing if it exists) with `mode` on Unix, and writes `bytes` durably.
fn write_new(path: &Path, bytes: &[u8], mode: u32) -> Result<(), KeyError> {
    let io = |source| KeyError::Io {
        path: path.to_owned(),
        source,
    };
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(mode);
    }
    #[cfg(not(unix))]
    let _ = mode;
    let mut file = options.open(path).map_err(|source| match source.kind() {
        std::io::ErrorKind::AlreadyExists => KeyError::Exists {
            path: path.to_owned(),
        },
        _ => io(source),
    })?;
    file.write_all(bytes).map_err(io)?;
    file.sync_all().map_err(io)
}

impl PublicKey {
    /// Reads a public key file (`ed25519:<64 hex digits>`).
    pub fn read(path: &Path) -> Result<Self, KeyError> {
        let line = read_line(path)?;
        Self::parse(&line).map_err(|why| KeyError::Malformed {
            path: path.to_owned(),
            why,
        })
    }

    /// Parses a public key file's line.
    pub fn parse(line: &str) -> Result<Self, String> {
        if line.starts_with(SECRET_PREFIX) {
            return Err("holds a signing key; give the public key (the `.pub` file)".into());
        }
        let hex = line
            .strip_prefix(PUBLIC_PREFIX)
            .ok_or("not a public key file (no `ed25519:` line)")?;
        let bytes = unhex32(hex).ok_or("the key is not 64 hex digits")?;
        let key = ed25519_dalek::VerifyingKey::from_bytes(&bytes)
            .map_err(|_| "not a valid Ed25519 public key".to_owned())?;
        Ok(PublicKey {
            id: key_id(&key),
            key,
        })
    }

    /// The key's file line: `ed25519:<64 hex digits>`.
    pub fn to_line(&self) -> String {
        format!("{PUBLIC_PREFIX}{}", hex(self.key.as_bytes()))
    }

    /// This key's id.
    pub fn id(&self) -> &str {
        &self.id
    }
}

/// A signed statement of a stream's head: what an auditor keeps as a witness and checks a
/// stream against. Serializes as a JSON object with these field names.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SignedHead {
    /// The stream (a receipt stream, or a kernel execution's event log).
    pub stream: String,
    /// How many entries it had.
    pub length: u64,
    /// The hash of its last entry (`""` for an empty stream).
    pub head: String,
    /// When it was signed (RFC 3339).
    pub at: String,
    /// The id of the key that signed it.
    pub key_id: String,
    /// The Ed25519 signature of [`SignedHead::message`], 128 hex digits; with a `proof`, the
    /// signature of the batch it was signed in.
    pub signature: String,
    /// For a head signed in a batch with others ([`SigningKey::sign_heads`]): how it ties to
    /// the batch's signed root. Absent for a head signed alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proof: Option<HeadProof>,
}

/// Why a signed head does not verify.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeadError {
    /// Signed by a key other than the one given.
    #[error("signed by key {found}, not by a given key ({expected})")]
    OtherKey {
        /// The key id the head names.
        found: String,
        /// The given key's id.
        expected: String,
    },
    /// The signature does not match the head's fields.
    #[error("the signature does not match (the head was altered, or forged)")]
    BadSignature,
}

impl SignedHead {
    /// The bytes signed: a JSON array of the domain tag and the fields in a fixed order.
    pub fn message(&self) -> Vec<u8> {
        serde_json::to_vec(&(
            HEAD_DOMAIN,
            &self.stream,
            self.length,
            &self.head,
            &self.at,
            &self.key_id,
        ))
        .expect("strings and an integer serialize")
    }

    /// Checks that the key of `keys` this head names signed exactly these fields.
    pub fn verify_any(&self, keys: &[PublicKey]) -> Result<(), HeadError> {
        match keys.iter().find(|k| k.id == self.key_id) {
            Some(key) => self.verify(key),
            None => Err(HeadError::OtherKey {
                found: self.key_id.clone(),
                expected: keys
                    .iter()
                    .map(|k| k.id.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            }),
        }
    }

    /// Checks that `key` signed exactly these fields.
    pub fn verify(&self, key: &PublicKey) -> Result<(), HeadError> {
        if self.key_id != key.id {
            return Err(HeadError::OtherKey {
                found: self.key_id.clone(),
                expected: key.id.clone(),
            });
        }
        let bytes = (self.signature.len() == 128)
            .then(|| {
                let mut out = [0u8; 64];
                let (a, b) = self.signature.split_at(64);
                out[..32].copy_from_slice(&unhex32(a)?);
                out[32..].copy_from_slice(&unhex32(b)?);
                Some(out)
            })
            .flatten()
            .ok_or(HeadError::BadSignature)?;
        let signature = ed25519_dalek::Signature::from_bytes(&bytes);
        let signed = match &self.proof {
            None => self.message(),
            Some(proof) => {
                let root = merkle_root(leaf_hash(&self.message()), proof)
                    .ok_or(HeadError::BadSignature)?;
                batch_message(&root, proof.count, &self.key_id)
            }
        };
        key.key
            .verify(&signed, &signature)
            .map_err(|_| HeadError::BadSignature)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(key: &SigningKey) -> SignedHead {
        key.sign_head("orders", 3, "ab12", "2026-01-01T00:00:00.000000Z")
    }

    #[test]
    fn heads_signed_together_each_verify_and_none_can_be_altered_or_moved() {
        let key = SigningKey::generate().unwrap();
        for n in [2usize, 3, 5, 8, 13] {
            let heads: Vec<(String, u64, String)> = (0..n)
                .map(|i| (format!("s{i}"), i as u64 + 1, format!("{i:064x}")))
                .collect();
            let refs: Vec<(&str, u64, &str, &str)> = heads
                .iter()
                .map(|(s, l, h)| (s.as_str(), *l, h.as_str(), "2026-01-01T00:00:00.000000Z"))
                .collect();
            let signed = key.sign_heads(&refs);
            assert_eq!(signed.len(), n);
            let signature = &signed[0].signature;
            for h in &signed {
                assert_eq!(&h.signature, signature, "one signature for the batch");
                assert_eq!(h.verify(&key.public()), Ok(()), "{n}: {h:?}");
                // Any field, the proof's position or a path hash altered: refused.
                let mut altered = h.clone();
                altered.length += 1;
                assert_eq!(altered.verify(&key.public()), Err(HeadError::BadSignature));
                let mut moved = h.clone();
                let proof = moved.proof.as_mut().unwrap();
                proof.index = (proof.index + 1) % proof.count;
                assert_eq!(moved.verify(&key.public()), Err(HeadError::BadSignature));
                let mut cut = h.clone();
                cut.proof.as_mut().unwrap().path.pop();
                assert_eq!(cut.verify(&key.public()), Err(HeadError::BadSignature));
                // Without its proof the batch signature is not a signature of the head alone.
                let mut bare = h.clone();
                bare.proof = None;
                assert_eq!(bare.verify(&key.public()), Err(HeadError::BadSignature));
            }
            // A head survives a JSON round trip with its proof.
            let text = serde_json::to_string(&signed[n - 1]).unwrap();
            let back: SignedHead = serde_json::from_str(&text).unwrap();
            assert_eq!(back.verify(&key.public()), Ok(()));
        }
        // One head alone is signed as sign_head signs it: no proof.
        let one = key.sign_heads(&[("s", 1, "ab", "2026-01-01T00:00:00.000000Z")]);
        assert!(one[0].proof.is_none());
        assert_eq!(one[0].verify(&key.public()), Ok(()));
    }

    #[test]
    fn a_head_verifies_with_its_key_only() {
        let key = SigningKey::generate().unwrap();
        let signed = head(&key);
        assert_eq!(signed.verify(&key.public()), Ok(()));
        let other = SigningKey::generate().unwrap();
        assert!(matches!(
            signed.verify(&other.public()),
            Err(HeadError::OtherKey { .. })
        ));
        // The other key claiming this key's id still fails on the signature.
        let mut forged = head(&other);
        forged.key_id = key.id().to_owned();
        assert_eq!(forged.verify(&key.public()), Err(HeadError::BadSignature));
    }

    #[test]
    fn every_field_is_covered_by_the_signature() {
        let key = SigningKey::generate().unwrap();
        let signed = head(&key);
        let alter: [fn(&mut SignedHead); 5] = [
            |h| h.stream.push('x'),
            |h| h.length += 1,
            |h| h.head = "ab13".into(),
            |h| h.at = "2026-01-01T00:00:01.000000Z".into(),
            |h| {
                let flipped = if h.signature.starts_with('0') {
                    "1"
                } else {
                    "0"
                };
                h.signature.replace_range(0..1, flipped)
            },
        ];
        for (i, f) in alter.iter().enumerate() {
            let mut h = signed.clone();
            f(&mut h);
            assert_eq!(h.verify(&key.public()), Err(HeadError::BadSignature), "{i}");
        }
        let mut short = signed.clone();
        short.signature.truncate(10);
        assert_eq!(short.verify(&key.public()), Err(HeadError::BadSignature));
    }

    #[test]
    fn keys_round_trip_through_files_and_refuse_mistakes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("signing.key");
        let key = SigningKey::generate().unwrap();
        let public_file = key.write(&path).unwrap();
        assert_eq!(public_file, dir.path().join("signing.key.pub"));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600);
        }
        let back = SigningKey::read(&path).unwrap();
        assert_eq!(back.id(), key.id());
        let public = PublicKey::read(&public_file).unwrap();
        assert_eq!(public, key.public());
        assert_eq!(head(&back).verify(&public), Ok(()));

        // Never overwritten.
        let again = SigningKey::generate().unwrap().write(&path).unwrap_err();
        assert!(matches!(again, KeyError::Exists { .. }), "{again}");
        // The wrong file for each reader, named in the error.
        let err = SigningKey::read(&public_file).unwrap_err().to_string();
        assert!(
            err.contains("signing.key.pub") && err.contains("public key"),
            "{err}"
        );
        let err = PublicKey::read(&path).unwrap_err().to_string();
        assert!(err.contains("signing key"), "{err}");
        // A signing key others may read is refused.
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
            let err = SigningKey::read(&path).unwrap_err();
            assert!(
                matches!(err, KeyError::Exposed { mode: 0o644, .. }),
                "{err}"
            );
        }
        let junk = dir.path().join("junk");
        std::fs::write(&junk, "ed25519:zz").unwrap();
        let err = PublicKey::read(&junk).unwrap_err().to_string();
        assert!(err.contains("64 hex digits"), "{err}");
    }

    #[test]
    fn a_signed_head_is_json_with_its_field_names() {
        let key = SigningKey::generate().unwrap();
        let signed = head(&key);
        let text = serde_json::to_string(&signed).unwrap();
        assert!(
            text.starts_with(r#"{"stream":"orders","length":3,"head":"ab12""#),
            "{text}"
        );
        let back: SignedHead = serde_json::from_str(&text).unwrap();
        assert_eq!(back, signed);
    }
}
