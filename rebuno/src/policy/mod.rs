//! Policy bundles, rule engine and rate limiter (in progress).
