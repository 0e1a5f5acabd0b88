//! Go-compatible canonical JSON, args hash and step ids (in progress).
