//! Static tokens: each stands for one principal named in the manifest.
//! Tokens are kept as hashes and compared in constant time, every one of
//! them on every request, so neither a token's value nor its position
//! shows in the time an answer takes.

use std::collections::BTreeSet;

use serde_json::{Map, Value};
use subtle::ConstantTimeEq;

use super::{Principal, StaticToken};

#[derive(Default)]
pub(super) struct StaticTokens {
    tokens: Vec<(blake3::Hash, Principal)>,
}

impl std::fmt::Debug for StaticTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Not even the hashes: a short token's hash can be searched offline.
        let names: Vec<&str> = self.tokens.iter().map(|(_, p)| p.id()).collect();
        f.debug_struct("StaticTokens")
            .field("principals", &names)
            .finish()
    }
}

impl StaticTokens {
    /// The tokens, each read from where it is.
    ///
    /// # Errors
    ///
    /// A token that cannot be read or is too short, two tokens for one
    /// principal, or one token for two.
    pub(super) fn new(tokens: &[StaticToken]) -> Result<Self, String> {
        let mut names = std::collections::HashSet::new();
        let mut hashes = std::collections::HashSet::new();
        let mut out = Vec::new();
        for token in tokens {
            if !names.insert(token.principal.as_str()) {
                return Err(format!(
                    "principal `{}` has two tokens (a manifest token and --token-env's are both \
                     principal `token`?); give each principal one token",
                    token.principal
                ));
            }
            let hash = blake3::hash(token.value()?.as_bytes());
            if !hashes.insert(hash) {
                return Err(format!(
                    "the token of `{}` is another principal's too; give each principal its own",
                    token.principal
                ));
            }
            let claims: Map<String, Value> = token
                .claims
                .iter()
                .map(|(k, v)| (k.clone(), Value::String(v.clone())))
                .collect();
            let scopes: BTreeSet<String> = token.scopes.iter().cloned().collect();
            let id = format!("token:{}", token.principal);
            out.push((hash, Principal::new(id.clone(), id, claims, scopes)));
        }
        Ok(Self { tokens: out })
    }

    /// The principal whose token `token` is.
    pub(super) fn find(&self, token: &str) -> Option<Principal> {
        let given = blake3::hash(token.as_bytes());
        let mut found = None;
        for (hash, principal) in &self.tokens {
            if bool::from(hash.as_bytes().ct_eq(given.as_bytes())) {
                found = Some(principal);
            }
        }
        found.cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_token_stands_for_its_principal_and_no_other() {
        let alice = StaticToken::new("alice".into(), "a".repeat(32), vec![]).unwrap();
        let bob =
            StaticToken::new("bob".into(), "b".repeat(32), vec!["tools:calc".into()]).unwrap();
        let tokens = StaticTokens::new(&[alice, bob]).unwrap();
        assert_eq!(tokens.find(&"a".repeat(32)).unwrap().id(), "token:alice");
        let bob = tokens.find(&"b".repeat(32)).unwrap();
        assert_eq!(bob.id(), "token:bob");
        assert!(bob.holds(&["tools:calc".into()]));
        assert!(!bob.holds(&["tools:recall".into()]));
        assert!(tokens.find(&"a".repeat(31)).is_none());
        assert!(tokens.find("").is_none());
    }

    #[test]
    fn one_token_for_two_principals_or_two_for_one_is_refused() {
        let a = StaticToken::new("alice".into(), "a".repeat(32), vec![]).unwrap();
        let b = StaticToken::new("bob".into(), "a".repeat(32), vec![]).unwrap();
        assert!(
            StaticTokens::new(&[a.clone(), b])
                .unwrap_err()
                .contains("another principal's")
        );
        let a2 = StaticToken::new("alice".into(), "c".repeat(32), vec![]).unwrap();
        assert!(
            StaticTokens::new(&[a, a2])
                .unwrap_err()
                .contains("two tokens")
        );
    }

    #[test]
    fn a_token_from_an_unset_variable_is_an_error_at_start_naming_it() {
        let t = StaticToken::from_env(
            "alice".into(),
            "TOOLHOST_TEST_UNSET_TOKEN_VAR".into(),
            vec![],
        )
        .unwrap();
        let e = StaticTokens::new(&[t]).unwrap_err();
        assert!(e.contains("TOOLHOST_TEST_UNSET_TOKEN_VAR"), "{e}");
    }

    #[test]
    fn debug_shows_no_token_and_no_hash() {
        let t = StaticToken::new("alice".into(), "s3cret-s3cret-s3cret".into(), vec![]).unwrap();
        let tokens = StaticTokens::new(std::slice::from_ref(&t)).unwrap();
        let hash = blake3::hash(b"s3cret-s3cret-s3cret").to_hex().to_string();
        for shown in [format!("{tokens:?}"), format!("{t:?}")] {
            assert!(
                !shown.contains("s3cret") && !shown.contains(&hash[..16]),
                "{shown}"
            );
        }
    }

    #[test]
    fn short_or_spaced_tokens_are_refused_with_the_fix() {
        for token in ["short", "has a space in it, long enough"] {
            let e = StaticToken::new("alice".into(), token.into(), vec![]).unwrap_err();
            assert!(e.contains("openssl rand -hex 32"), "{e}");
        }
    }
}
