//! Shared helpers for the runnable examples in this package (none yet); the examples themselves
//! are the `[[example]]` targets beside this file.
