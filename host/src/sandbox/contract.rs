//! The two contract versions a component may be built against, behind one
//! shape: a 0.1 component is linked, instantiated, described and called
//! here, and everything past this module sees 0.2's types (0.1's one text
//! result as one text block, its specs without a title).

use wasmtime::Store;
use wasmtime::component::{HasSelf, InstancePre, Linker};
use wasmtime::error::Context as _;

use super::bindings::v0_1::toolhost::tool0_1_0 as old;
use super::bindings::v0_2::toolhost::tool::types as wit;
use super::bindings::{v0_1, v0_2};
use super::keyvalue;
use super::state::State;

/// Add what both contract versions import (besides WASI and wasi:http):
/// `host` of 0.1 and 0.2, and `wasi:keyvalue`.
pub(crate) fn add_to_linker(linker: &mut Linker<State>) -> wasmtime::Result<()> {
    v0_2::toolhost::tool::host::add_to_linker::<State, HasSelf<State>>(linker, |s| s)?;
    keyvalue::add_to_linker(linker)?;
    old::host::add_to_linker::<State, HasSelf<State>>(linker, |s| s)?;
    Ok(())
}

/// Which contract a component was built against: its linked component,
/// ready to instantiate.
pub(super) enum Contract {
    V0_1(v0_1::ToolboxPre<State>),
    /// 0.2.0 or 0.2.1 (which only adds imports), as [`Contract::version`].
    V0_2(v0_2::ToolboxPre<State>, &'static str),
}

/// An instance's exports, in the contract it was built against.
pub(super) enum Toolbox {
    V0_1(v0_1::Toolbox),
    V0_2(v0_2::Toolbox),
}

impl Contract {
    /// The contract `pre` (the component called `label`) exports.
    ///
    /// # Errors
    ///
    /// When it exports neither version of `toolhost:tool/tool`.
    pub(super) fn of(pre: InstancePre<State>, label: &str) -> wasmtime::Result<Self> {
        Ok(match v0_2::ToolboxPre::new(pre.clone()) {
            Ok(linked) => Self::V0_2(linked, version_0_2(&pre)),
            Err(_) => Self::V0_1(v0_1::ToolboxPre::new(pre).with_context(|| {
                format!(
                    "{label} exports neither toolhost:tool/tool@0.2 nor @0.1.0; build it against the toolbox world in wit/"
                )
            })?),
        })
    }

    /// `0.1.0`, `0.2.0` or `0.2.1`.
    pub(super) fn version(&self) -> &'static str {
        match self {
            Self::V0_1(_) => "0.1.0",
            Self::V0_2(_, version) => version,
        }
    }

    /// A new instance of the component in `store`.
    pub(super) async fn instantiate(&self, store: &mut Store<State>) -> wasmtime::Result<Toolbox> {
        Ok(match self {
            Self::V0_2(pre, _) => Toolbox::V0_2(pre.instantiate_async(&mut *store).await?),
            Self::V0_1(pre) => Toolbox::V0_1(pre.instantiate_async(&mut *store).await?),
        })
    }
}

impl Toolbox {
    /// The tools the instance declares.
    pub(super) async fn tools(
        &self,
        store: &mut Store<State>,
    ) -> wasmtime::Result<Vec<wit::ToolSpec>> {
        Ok(match self {
            Self::V0_2(toolbox) => toolbox.toolhost_tool_tool().call_tools(store).await?,
            Self::V0_1(toolbox) => {
                let specs = toolbox.toolhost_tool0_1_0_tool().call_tools(store).await?;
                specs.into_iter().map(upgrade_spec).collect()
            }
        })
    }

    /// Run `name` once in the instance, which lives in `store`.
    pub(super) async fn call(
        &self,
        store: &mut Store<State>,
        name: &str,
        arguments: &str,
        context: &wit::CallContext,
    ) -> wasmtime::Result<Result<wit::ToolOutput, wit::ToolError>> {
        let toolbox = match self {
            Self::V0_2(toolbox) => {
                return toolbox
                    .toolhost_tool_tool()
                    .call_call(store, name, arguments, context)
                    .await;
            }
            Self::V0_1(toolbox) => toolbox,
        };
        let context = old::types::CallContext {
            call_id: context.call_id.clone(),
            deadline_ms: context.deadline_ms,
        };
        let result = toolbox
            .toolhost_tool0_1_0_tool()
            .call_call(store, name, arguments, &context)
            .await?;
        Ok(result
            .map(|output| wit::ToolOutput {
                content: vec![wit::ContentBlock::Text(output.content)],
                structured: output.structured,
                artifact: output.artifact,
            })
            .map_err(|error| wit::ToolError {
                kind: error.kind,
                message: error.message,
                retryable: error.retryable,
            }))
    }
}

/// Which 0.2 a component that links as 0.2 was built against: the newest
/// version of `toolhost:tool` among what it imports and exports (the
/// component model matched each to the host's 0.2.1, whatever its patch).
/// It linked, so it asks nothing past 0.2.1.
fn version_0_2(pre: &InstancePre<State>) -> &'static str {
    let component = pre.component();
    let ty = component.component_type();
    let engine = component.engine();
    let names = ty
        .imports(engine)
        .map(|(name, _)| name)
        .chain(ty.exports(engine).map(|(name, _)| name));
    let only_0_2_0 = names
        .filter_map(|name| name.strip_prefix("toolhost:tool/"))
        .filter_map(|name| name.split_once('@'))
        .all(|(_, version)| version == "0.2.0");
    if only_0_2_0 { "0.2.0" } else { "0.2.1" }
}

/// A 0.1 spec in 0.2's shape: no title.
fn upgrade_spec(spec: old::types::ToolSpec) -> wit::ToolSpec {
    use old::types::Hints as Old;
    let mut hints = wit::Hints::empty();
    for (old, new) in [
        (Old::READ_ONLY, wit::Hints::READ_ONLY),
        (Old::DESTRUCTIVE, wit::Hints::DESTRUCTIVE),
        (Old::IDEMPOTENT, wit::Hints::IDEMPOTENT),
        (Old::OPEN_WORLD, wit::Hints::OPEN_WORLD),
    ] {
        if spec.hints.contains(old) {
            hints |= new;
        }
    }
    wit::ToolSpec {
        name: spec.name,
        title: None,
        description: spec.description,
        input_schema: spec.input_schema,
        output_schema: spec.output_schema,
        hints,
    }
}
