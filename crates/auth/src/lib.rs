//! Who may call: organizations' API keys and the operator's admin token.
//! Only digests are stored; the secrets are shown once, when made.

pub mod admin_token;
pub mod keys;
