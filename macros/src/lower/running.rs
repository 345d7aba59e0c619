//! The plan the engine runs for a declaration: laid out and named as the
//! engine's builder makes it, as a checkpoint records it.

use weir_plan::{DataType, Field, Op, StreamPlan};

use super::*;

/// The plan the engine runs for a declaration, with the names of the
/// sources `writer_from` hands it.
///
/// The macro checks `Lowered::plan`, whose names and layout the compile
/// errors and lock files are keyed by (a source named after its rows, a
/// join among the main stream's ops). The engine runs the plan its builder
/// makes of the same query, and a checkpoint records that plan, names
/// included: this is that plan, so existing checkpoints keep working.
pub struct Running {
    /// The plan: the main stream's source `stream` and node `result`; for a
    /// join, a node of its own (`joined`, reading `result`) that holds the
    /// join and the ops after it, the joined stream's source `stream_1`
    /// and node `result_right` (before `joined`) or the static table.
    pub plan: StreamPlan,
    /// The main stream's source in `plan.sources`.
    pub source: String,
    /// The joined stream's source in `plan.sources`, for a stream-stream join.
    pub other: Option<String>,
}

/// `declared` as the engine's builder lays it out and names it
/// (`engine/src/dataset.rs`: `read_stream`, `join`, `join_static`): each
/// stream read is a plan of its own (source `stream`, node `result`); a
/// join moves the other stream's source and nodes in under fresh names
/// (`stream_1`, `result_right`) and adds node `joined`. A Kafka source
/// decoded from JSON or CSV (`decoded`: the main stream's, the joined
/// stream's) has the engine's `_corrupt_record` column after the declared
/// ones (Spark's PERMISSIVE mode).
pub(super) fn running_plan(
    declared: &StreamPlan,
    join: Option<&JoinSide>,
    decoded: (bool, bool),
) -> Running {
    let Some(main) = declared.nodes.last() else {
        return Running {
            plan: declared.clone(),
            source: String::new(),
            other: None,
        };
    };
    let schema = |source: &str, decoded: bool| {
        let mut fields = declared
            .sources
            .get(source)
            .map(|d| d.schema.clone())
            .unwrap_or_default();
        if decoded && !fields.iter().any(|f| f.name == "_corrupt_record") {
            fields.push(Field::new("_corrupt_record", DataType::String));
        }
        fields
    };
    let fields = schema(&main.input, decoded.0);
    let at = main.ops.iter().position(|o| matches!(o, Op::Join { .. }));
    let (before, after) = main.ops.split_at(at.unwrap_or(main.ops.len()));
    let mut plan = StreamPlan::single("stream", fields, before.to_vec(), declared.output_mode);
    let mut other = None;
    if let (Some(Op::Join { how, on, using, .. }), Some(side)) = (after.first(), join) {
        let right = if side.table {
            let name = fresh(&plan, &side.name);
            let schema = declared
                .statics
                .get(&side.name)
                .map(|t| t.schema.clone())
                .unwrap_or_default();
            plan.statics.insert(
                name.clone(),
                weir_plan::StaticDecl {
                    schema,
                    rows: vec![],
                },
            );
            name
        } else {
            // The joined stream: its own plan's source and node, renamed.
            let node = declared.nodes.first().filter(|n| n.id == side.name);
            let (input, ops) = node
                .map(|n| (n.input.as_str(), n.ops.clone()))
                .unwrap_or_default();
            let source = fresh(&plan, "stream");
            plan.sources.insert(
                source.clone(),
                weir_plan::SourceDecl {
                    schema: schema(input, decoded.1),
                },
            );
            let id = fresh(&plan, "result_right");
            plan.nodes.push(weir_plan::Node {
                id: id.clone(),
                input: source.clone(),
                ops,
            });
            other = Some(source);
            id
        };
        // The builder's join condition: `ON <sql>`, or `USING (keys)`.
        let using = match on {
            Some(_) => None,
            None => Some(using.clone().unwrap_or_default()),
        };
        let id = fresh(&plan, "joined");
        let mut ops = vec![Op::Join {
            right,
            how: *how,
            on: on.clone(),
            using,
        }];
        ops.extend(after[1..].iter().cloned());
        plan.nodes.push(weir_plan::Node {
            id: id.clone(),
            input: plan.result.clone(),
            ops,
        });
        plan.result = id;
    }
    plan.conf = declared.conf.clone();
    plan.sink = declared.sink.clone();
    plan.trigger = declared.trigger;
    plan.scale_out = declared.scale_out.clone();
    Running {
        plan,
        source: "stream".into(),
        other,
    }
}

/// `base`, or `base_1`, `base_2`, ... if a source, table or node of `plan`
/// has that name (the builder's names for what a join moves in).
pub(super) fn fresh(plan: &StreamPlan, base: &str) -> String {
    let taken = |name: &str| {
        plan.sources.contains_key(name)
            || plan.statics.contains_key(name)
            || plan.nodes.iter().any(|n| n.id == name)
    };
    if !taken(base) {
        return base.to_string();
    }
    (1..)
        .map(|i| format!("{base}_{i}"))
        .find(|n| !taken(n))
        .unwrap_or_default()
}
