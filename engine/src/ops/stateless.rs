//! Stateless operators: filter, select and with_column, evaluated by
//! DataFusion physical expressions planned once per query. No state.

use std::sync::{Arc, OnceLock};

use arrow::array::{Array, BooleanArray};
use arrow::datatypes::{Field, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use datafusion::common::DFSchema;
use datafusion::logical_expr::simplify::SimplifyContext;
use datafusion::optimizer::simplify_expressions::ExprSimplifier;
use datafusion::physical_plan::PhysicalExpr;
use datafusion::prelude::SessionContext;

use weir_plan::expr::Expr;

use crate::error::{Result, WeirError};

/// Plans SQL expression text against a schema.
///
/// DataFusion's session (with every built-in function registered) is made
/// at the first expression planned: a query without filters or
/// projections never builds it, so it neither pays for it at start nor
/// keeps that code resident.
pub struct ExprPlanner {
    ctx: OnceLock<SessionContext>,
}

impl Default for ExprPlanner {
    fn default() -> Self {
        Self::new()
    }
}

impl ExprPlanner {
    /// A planner with weir's Spark-compatible functions registered (at the
    /// first expression planned).
    pub fn new() -> ExprPlanner {
        ExprPlanner {
            ctx: OnceLock::new(),
        }
    }

    /// The DataFusion session the expressions are planned in.
    fn ctx(&self) -> &SessionContext {
        self.ctx.get_or_init(|| {
            let ctx = SessionContext::new();
            super::functions::register(&ctx);
            ctx
        })
    }

    /// Plans `sql` over `schema`: read into the plan's expression tree,
    /// then lowered to DataFusion ([`super::lower`]).
    pub fn plan(&self, sql: &str, schema: &SchemaRef) -> Result<Arc<dyn PhysicalExpr>> {
        let tree = Expr::parse(sql).map_err(|e| WeirError::Expr {
            expr: sql.to_string(),
            message: e.message,
        })?;
        self.plan_tree(&tree, schema)
    }

    /// Plans an expression tree over `schema`.
    pub fn plan_tree(&self, tree: &Expr, schema: &SchemaRef) -> Result<Arc<dyn PhysicalExpr>> {
        if let Some(e) = tree.invalid() {
            return Err(WeirError::Expr {
                expr: e.sql,
                message: e.message,
            });
        }
        let err = |e: datafusion::error::DataFusionError| WeirError::Expr {
            expr: tree.to_string(),
            message: e.strip_backtrace().to_string(),
        };
        let ctx = self.ctx();
        let df_schema = DFSchema::try_from(schema.as_ref().clone()).map_err(err)?;
        let expr = super::lower::lower(tree, ctx, &df_schema).map_err(err)?;
        // Function calls built directly (coalesce, ...) rely on DataFusion's
        // simplifier, as its optimizer would run it over a query.
        let simplifier = ExprSimplifier::new(
            SimplifyContext::builder()
                .with_schema(Arc::new(df_schema.clone()))
                .with_config_options(Arc::clone(ctx.state().config_options()))
                .build(),
        );
        let expr = simplifier.coerce(expr, &df_schema).map_err(err)?;
        let expr = simplifier.simplify(expr).map_err(err)?;
        ctx.create_physical_expr(expr, &df_schema).map_err(err)
    }
}

/// Evaluates `expr` over `batch` into an array of `batch.num_rows()` rows.
pub fn eval(expr: &Arc<dyn PhysicalExpr>, batch: &RecordBatch) -> Result<Arc<dyn Array>> {
    Ok(expr.evaluate(batch)?.into_array(batch.num_rows())?)
}

/// Keeps the rows where a predicate is true.
#[derive(Clone)]
pub struct FilterOp {
    predicate: Arc<dyn PhysicalExpr>,
    schema: SchemaRef,
}

impl FilterOp {
    /// Plans `predicate` over `schema`.
    pub fn new(planner: &ExprPlanner, predicate: &Expr, schema: SchemaRef) -> Result<FilterOp> {
        let p = planner.plan_tree(predicate, &schema)?;
        let t = p.data_type(&schema)?;
        if t != arrow::datatypes::DataType::Boolean {
            return Err(WeirError::Expr {
                expr: predicate.to_string(),
                message: format!("a filter needs a boolean condition, this is {t}"),
            });
        }
        Ok(FilterOp {
            predicate: p,
            schema,
        })
    }

    /// The output schema (the input's).
    pub fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    /// Filters one batch.
    pub fn apply(&self, batch: &RecordBatch) -> Result<RecordBatch> {
        let mask = eval(&self.predicate, batch)?;
        let mask = mask
            .as_any()
            .downcast_ref::<BooleanArray>()
            .ok_or_else(|| WeirError::Config("filter predicate did not produce booleans".into()))?;
        Ok(arrow::compute::filter_record_batch(batch, mask)?)
    }
}

/// Computes a new set of columns (select) or adds/replaces one (with_column).
#[derive(Clone)]
pub struct ProjectOp {
    exprs: Vec<Arc<dyn PhysicalExpr>>,
    schema: SchemaRef,
}

impl ProjectOp {
    /// `select expr AS alias, ...`.
    pub fn select(
        planner: &ExprPlanner,
        items: &[(Expr, String)],
        input: SchemaRef,
    ) -> Result<ProjectOp> {
        let mut exprs = Vec::new();
        let mut fields = Vec::new();
        for (expr, alias) in items {
            let e = planner.plan_tree(expr, &input)?;
            fields.push(Field::new(alias, e.data_type(&input)?, true));
            exprs.push(e);
        }
        Ok(ProjectOp {
            exprs,
            schema: Arc::new(Schema::new(fields)),
        })
    }

    /// `with_column(name, expr)`: all input columns, `name` replaced or appended.
    pub fn with_column(
        planner: &ExprPlanner,
        name: &str,
        expr: &Expr,
        input: SchemaRef,
    ) -> Result<ProjectOp> {
        let mut items: Vec<(Expr, String)> = input
            .fields()
            .iter()
            .map(|f| (Expr::column(f.name().clone()), f.name().clone()))
            .collect();
        match items.iter_mut().find(|(_, a)| a == name) {
            Some(it) => it.0 = expr.clone(),
            None => items.push((expr.clone(), name.to_string())),
        }
        Self::select(planner, &items, input)
    }

    /// The output schema.
    pub fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    /// Projects one batch.
    pub fn apply(&self, batch: &RecordBatch) -> Result<RecordBatch> {
        let cols = self
            .exprs
            .iter()
            .map(|e| eval(e, batch))
            .collect::<Result<Vec<_>>>()?;
        if cols.is_empty() {
            return Ok(RecordBatch::try_new_with_options(
                self.schema.clone(),
                cols,
                &arrow::record_batch::RecordBatchOptions::new()
                    .with_row_count(Some(batch.num_rows())),
            )?);
        }
        Ok(RecordBatch::try_new(self.schema.clone(), cols)?)
    }
}
