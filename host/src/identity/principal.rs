//! A principal: who a request comes from, the scopes it holds, and the
//! context its claims fill.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde_json::{Map, Value};

use super::ContextSource;

/// The scope that holds every tool's scope (`tools:NAME`).
pub(crate) const ALL_TOOLS: &str = "tools:*";

/// Who a request comes from. Cheap to clone: every call of a request
/// holds it.
#[derive(Clone, Debug)]
pub struct Principal(Arc<Who>);

#[derive(Debug)]
struct Who {
    id: String,
    class: String,
    claims: Map<String, Value>,
    /// `None`: every scope (the local user, or a server that tells no
    /// callers apart).
    scopes: Option<BTreeSet<String>>,
}

impl Principal {
    /// The one principal of a server that tells no callers apart (stdio,
    /// loopback, a single `--token-env` token): every scope, no claims.
    #[must_use]
    pub fn anyone() -> Self {
        Self(Arc::new(Who {
            id: "anyone".into(),
            class: "anyone".into(),
            claims: Map::new(),
            scopes: None,
        }))
    }

    pub(super) fn new(
        id: String,
        class: String,
        claims: Map<String, Value>,
        scopes: BTreeSet<String>,
    ) -> Self {
        Self(Arc::new(Who {
            id,
            class,
            claims,
            scopes: Some(scopes),
        }))
    }

    /// The principal's id: what limits, tasks and sessions are kept by.
    /// `token:NAME` for a static token, `oauth:ISSUER#SUBJECT` for an
    /// access token.
    #[must_use]
    pub fn id(&self) -> &str {
        &self.0.id
    }

    /// A label of few values, for metrics: `anyone`, `oauth`, or
    /// `token:NAME`.
    #[must_use]
    pub fn class(&self) -> &str {
        &self.0.class
    }

    /// Whether the principal holds every scope in `required`. `tools:*`
    /// holds every `tools:NAME`.
    #[must_use]
    pub fn holds(&self, required: &[String]) -> bool {
        let Some(scopes) = &self.0.scopes else {
            return true;
        };
        required.iter().all(|scope| {
            scopes.contains(scope) || scope.starts_with("tools:") && scopes.contains(ALL_TOOLS)
        })
    }

    /// The call's context: the keys `bindings` binds to the principal
    /// filled from its id or claims, the others from `requested` (the
    /// request's context) where `bindings` lets the caller give them; any
    /// other key is refused.
    ///
    /// Without bindings (`None`: a server that tells no callers apart), the
    /// request's context is the context, as before identities.
    ///
    /// # Errors
    ///
    /// The request gives a key bound to a claim (never merged, even when
    /// equal), or a key the bindings do not name.
    pub fn context(
        &self,
        bindings: Option<&BTreeMap<String, ContextSource>>,
        requested: Option<Value>,
    ) -> Result<Option<Value>, ContextError> {
        let Some(bindings) = bindings else {
            return Ok(requested);
        };
        let requested = match requested {
            None => Map::new(),
            Some(Value::Object(map)) => map,
            Some(_) => return Err(ContextError::NotAnObject),
        };
        let mut context = Map::new();
        for (key, value) in requested {
            match bindings.get(&key) {
                Some(ContextSource::Caller) => {
                    context.insert(key, value);
                }
                Some(ContextSource::Claim(claim)) => {
                    return Err(ContextError::Bound {
                        key,
                        claim: format!("the token's `{claim}` claim"),
                    });
                }
                Some(ContextSource::Principal) => {
                    return Err(ContextError::Bound {
                        key,
                        claim: "who you are".into(),
                    });
                }
                None => return Err(ContextError::Unknown { key }),
            }
        }
        for (key, source) in bindings {
            let value = match source {
                ContextSource::Claim(claim) => self
                    .0
                    .claims
                    .get(claim)
                    .filter(|v| v.is_string() || v.is_number())
                    .cloned(),
                ContextSource::Principal => Some(Value::String(self.0.id.clone())),
                ContextSource::Caller => None,
            };
            if let Some(value) = value {
                context.insert(key.clone(), value);
            }
        }
        Ok((!context.is_empty()).then_some(Value::Object(context)))
    }
}

/// Why a request's context is refused; the message says the fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ContextError {
    /// The request sets a key the server fills from the caller's identity.
    #[error(
        "the context key `{key}` comes from your identity ({claim}), not from the request; \
         leave it out"
    )]
    Bound {
        /// The key.
        key: String,
        /// What of the identity it is bound to.
        claim: String,
    },
    /// The request sets a key the server's configuration does not name.
    #[error(
        "the context key `{key}` is not one this server takes from callers; leave it out (the \
         operator lets callers give it with `context.{key} = \"caller\"` under [serve.auth])"
    )]
    Unknown {
        /// The key.
        key: String,
    },
    /// The context is not a JSON object.
    #[error("the context must be a JSON object, e.g. {{\"conversation\":\"c-17\"}}")]
    NotAnObject,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn alice() -> Principal {
        let claims = json!({"sub": "alice", "org": "acme", "groups": ["a"]});
        let Value::Object(claims) = claims else {
            unreachable!()
        };
        Principal::new(
            "oauth:https://idp#alice".into(),
            "oauth".into(),
            claims,
            BTreeSet::from(["notes:read".to_owned(), "tools:calc".to_owned()]),
        )
    }

    fn bindings() -> BTreeMap<String, ContextSource> {
        BTreeMap::from([
            ("user".to_owned(), ContextSource::Claim("sub".into())),
            ("org".to_owned(), ContextSource::Claim("org".into())),
            ("team".to_owned(), ContextSource::Claim("groups".into())),
            ("conversation".to_owned(), ContextSource::Caller),
        ])
    }

    #[test]
    fn bound_keys_come_from_claims_and_caller_keys_from_the_request() {
        let context = alice()
            .context(Some(&bindings()), Some(json!({"conversation": "c-1"})))
            .unwrap();
        // `groups` is not a string or number: the key stays unset, so a
        // store scoped by it refuses the call rather than sharing one value.
        assert_eq!(
            context,
            Some(json!({"user": "alice", "org": "acme", "conversation": "c-1"}))
        );
    }

    #[test]
    fn a_request_that_sets_a_bound_key_is_refused_even_with_the_same_value() {
        for value in ["bob", "alice"] {
            let refused = alice().context(Some(&bindings()), Some(json!({"user": value})));
            assert!(matches!(refused, Err(ContextError::Bound { ref key, .. }) if key == "user"));
        }
    }

    #[test]
    fn a_request_that_sets_an_unnamed_key_is_refused() {
        let refused = alice().context(Some(&bindings()), Some(json!({"tenant": "x"})));
        assert!(matches!(refused, Err(ContextError::Unknown { .. })));
        assert!(
            refused
                .unwrap_err()
                .to_string()
                .contains("context.tenant = \"caller\"")
        );
    }

    #[test]
    fn without_bindings_the_request_context_stands() {
        let context = Principal::anyone()
            .context(None, Some(json!({"user": "ada"})))
            .unwrap();
        assert_eq!(context, Some(json!({"user": "ada"})));
        // Told apart with no bindings at all: no key may come from a request.
        let refused = alice().context(Some(&BTreeMap::new()), Some(json!({"user": "ada"})));
        assert!(matches!(refused, Err(ContextError::Unknown { .. })));
    }

    #[test]
    fn a_principal_binding_is_the_principal_id() {
        let bindings = BTreeMap::from([("user".to_owned(), ContextSource::Principal)]);
        let context = alice().context(Some(&bindings), None).unwrap();
        assert_eq!(context, Some(json!({"user": "oauth:https://idp#alice"})));
        let refused = alice().context(Some(&bindings), Some(json!({"user": "x"})));
        assert!(refused.unwrap_err().to_string().contains("who you are"));
    }

    #[test]
    fn tools_star_holds_every_tool_scope_and_nothing_else() {
        let all = Principal::new(
            "token:all".into(),
            "token:all".into(),
            Map::new(),
            BTreeSet::from([ALL_TOOLS.to_owned()]),
        );
        assert!(all.holds(&["tools:recall".into()]));
        assert!(!all.holds(&["notes:write".into()]));
        assert!(alice().holds(&["tools:calc".into(), "notes:read".into()]));
        assert!(!alice().holds(&["tools:recall".into()]));
        assert!(Principal::anyone().holds(&["notes:write".into()]));
    }
}
