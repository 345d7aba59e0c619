//! Triggers: when micro-batches run.

use std::time::Duration;

use crate::error::{Result, WeirError};

/// When micro-batches run (Spark's `Trigger`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Trigger {
    /// As soon as the previous batch finished (Spark's default).
    #[default]
    Default,
    /// On a fixed schedule; a batch that runs late starts the next at once.
    ProcessingTime(Duration),
    /// Process everything available at start, in as many batches as the
    /// source limits allow, then stop.
    AvailableNow,
    /// One batch, then stop (deprecated in Spark in favour of AvailableNow).
    Once,
}

impl Trigger {
    /// `processing_time("5 seconds")`. The interval must be positive (Spark
    /// also takes 0, meaning as soon as possible: that is
    /// [`Trigger::Default`], weir's default).
    pub fn processing_time(interval: &str) -> Result<Trigger> {
        let ms = weir_plan::duration::parse_positive_duration_ms(interval).map_err(|e| {
            WeirError::Config(format!(
                "trigger interval \"{interval}\": {e} (to run micro-batches as soon as possible, leave the default trigger)"
            ))
        })?;
        Ok(Trigger::ProcessingTime(Duration::from_millis(ms as u64)))
    }

    /// The trigger as the plan declares it (what `explain()` and the plan's
    /// rules read).
    pub(crate) fn decl(self) -> weir_plan::TriggerDecl {
        match self {
            Trigger::Default => weir_plan::TriggerDecl::Default,
            Trigger::ProcessingTime(d) => {
                weir_plan::TriggerDecl::ProcessingTime(d.as_millis() as u64)
            }
            Trigger::AvailableNow => weir_plan::TriggerDecl::AvailableNow,
            Trigger::Once => weir_plan::TriggerDecl::Once,
        }
    }
}
