//! Static tokens: each stands for one principal named in the manifest.
//! Tokens are kept as hashes and compared in constant time, every one of
//! them on every request, so neither a token's value nor its position
//! shows in the time an answer takes.

use std::collections::BTreeSet;

use serde_json::{Map, Value};
use subtle::ConstantTimeEq;

use super::{Principal, StaticToken};

#[derive(Debug, Default)]
pub(super) struct StaticTokens {
    tokens: Vec<(blake3::Hash, Principal)>,
}

impl StaticTokens {
    pub(super) fn new(tokens: &[StaticToken]) -> Self {
        let tokens = tokens
            .iter()
            .map(|token| {
                let claims: Map<String, Value> = token
                    .claims
                    .iter()
                    .map(|(k, v)| (k.clone(), Value::String(v.clone())))
                    .collect();
                let scopes: BTreeSet<String> = token.scopes.iter().cloned().collect();
                let principal = Principal::new(
                    format!("token:{}", token.principal),
                    format!("token:{}", token.principal),
                    claims,
                    scopes,
                );
                (blake3::hash(token.token.as_bytes()), principal)
            })
            .collect();
        Self { tokens }
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
        let tokens = StaticTokens::new(&[alice, bob]);
        assert_eq!(tokens.find(&"a".repeat(32)).unwrap().id(), "token:alice");
        let bob = tokens.find(&"b".repeat(32)).unwrap();
        assert_eq!(bob.id(), "token:bob");
        assert!(bob.holds(&["tools:calc".into()]));
        assert!(!bob.holds(&["tools:recall".into()]));
        assert!(tokens.find(&"a".repeat(31)).is_none());
        assert!(tokens.find("").is_none());
    }

    #[test]
    fn short_or_spaced_tokens_are_refused_with_the_fix() {
        for token in ["short", "has a space in it, long enough"] {
            let e = StaticToken::new("alice".into(), token.into(), vec![]).unwrap_err();
            assert!(e.contains("openssl rand -hex 32"), "{e}");
        }
    }
}
