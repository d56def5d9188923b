//! What the client can do, as far as a call cares: whether it speaks the
//! stateless revision, whether it can be asked questions, and whether it
//! declared every capability a tool's component requires.

use rmcp::model::{ErrorData, ProtocolVersion};
use rmcp::service::{RequestContext, RoleServer};
use serde_json::Value;

use crate::component::{ClientCapability, ComponentConfig};

/// Whether the request speaks the stateless revision (2026-07-28 or later),
/// where every request says what it needs in its own `_meta` and the
/// server sends the client no requests of its own.
pub(super) fn stateless(context: &RequestContext<RoleServer>) -> bool {
    context
        .protocol_version()
        .is_some_and(|v| v.as_str() >= ProtocolVersion::V_2026_07_28.as_str())
}

/// Whether the client declared elicitation (at `initialize`, or in a
/// 2026-07-28 request's `_meta`).
fn declares_elicitation(context: &RequestContext<RoleServer>) -> bool {
    context
        .client_capabilities()
        .is_some_and(|c| c.elicitation.is_some())
}

/// Whether the client can be asked with requests of the server's own
/// (`elicitation/create`): it declared elicitation, and it speaks a
/// revision that lets the server send it requests (before 2026-07-28).
pub(super) fn can_ask(context: &RequestContext<RoleServer>) -> bool {
    !stateless(context) && declares_elicitation(context)
}

/// Whether the client can be asked through input-required results
/// (SEP-2322): a 2026-07-28 request that declared elicitation.
pub(super) fn can_ask_in_results(context: &RequestContext<RoleServer>) -> bool {
    stateless(context) && declares_elicitation(context)
}

/// The error for a call of `tool` by a client that did not declare every
/// capability its component requires (`client_capabilities` in the
/// manifest): MCP's `MissingRequiredClientCapability` (−32021), naming
/// what is missing in `data.requiredCapabilities`. (Questions reach a
/// 2025-11-25 session as `elicitation/create` requests, and a 2026-07-28
/// request through input-required results or its task's input requests.)
pub(super) fn missing_capabilities(
    tool: &str,
    config: &ComponentConfig,
    declared: Option<rmcp::model::ClientCapabilities>,
) -> Option<ErrorData> {
    if config.client_capabilities.is_empty() {
        return None;
    }
    let declared = serde_json::to_value(declared.unwrap_or_default()).unwrap_or_default();
    let usable = |capability: &ClientCapability| {
        declared
            .get(capability.name())
            .is_some_and(|v| !v.is_null())
    };
    let missing: serde_json::Map<String, Value> = config
        .client_capabilities
        .iter()
        .filter(|capability| !usable(capability))
        .map(|capability| {
            (
                capability.name().to_owned(),
                Value::Object(serde_json::Map::new()),
            )
        })
        .collect();
    if missing.is_empty() {
        return None;
    }
    let names: Vec<&str> = missing.keys().map(String::as_str).collect();
    Some(ErrorData::new(
        rmcp::model::ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY,
        format!(
            "tool '{}' needs a client that declares {}; this client did not (declare it in the \
             client's capabilities, or use a client that supports it)",
            crate::outcome::clip(tool, 64),
            names.join(" and ")
        ),
        Some(serde_json::json!({"requiredCapabilities": missing})),
    ))
}
