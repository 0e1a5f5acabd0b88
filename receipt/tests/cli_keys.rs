//! `receipt keygen`: a key pair written once, its id printed, mistakes named.

#[test]
fn keygen_writes_a_key_pair_once() {
    test_support::keys::check_keygen(env!("CARGO_BIN_EXE_receipt").as_ref());
}
