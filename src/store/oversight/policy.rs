//! A store's policy (`ctrlrun policy apply`, docs/roles.md), read and replaced whole, written
//! once for both backends. Where it binds: a reservation (each backend's, and on PostgreSQL
//! the server's guard) and a new approval request ([`super::approvals`]).

use super::tx::{OversightStore, OversightTx};
use crate::approval::ActionRule;
use crate::error::{Error, Result};
use crate::planner;
use crate::store::recovery::Commit;

/// A store's policy.
pub trait StorePolicy {
    /// Every action's rule, by name.
    fn policy(&self) -> Result<Vec<ActionRule>>;

    /// Make `rules` the store's whole policy in one transaction (the owner's duty on
    /// PostgreSQL).
    fn apply_policy(&self, rules: &[ActionRule]) -> Result<()>;
}

impl<S: OversightStore> StorePolicy for S {
    fn policy(&self) -> Result<Vec<ActionRule>> {
        let found = self.read(("policy", ""), |tx| tx.rules(None))?;
        found.map_err(|e| self.read_failed("policy", e))
    }

    fn apply_policy(&self, rules: &[ActionRule]) -> Result<()> {
        const WHAT: &str = "apply_policy";
        planner::check_rules(rules)?;
        for r in rules {
            self.check_text(&r.action)?;
        }
        let fixed = self.fixed_now(None);
        let written = self.write((WHAT, "*"), |tx| {
            let fail = |e| self.write_failed(WHAT, "*", e);
            let now = tx.clock(fixed).map_err(fail)?;
            tx.replace_rules(rules, now).map_err(fail)
        })?;
        let Commit::Unknown((), why) = written else {
            return Ok(());
        };
        // The whole policy is the write: a re-read that finds it says it landed.
        let mut wanted = rules.to_vec();
        wanted.sort_by(|a, b| a.action.cmp(&b.action));
        match self.fresh(|tx| tx.rules(None)) {
            Ok(found) if found == wanted => Ok(()),
            Ok(_) => Err(Error::unresolved(format!(
                "the COMMIT of {WHAT} failed ({why}) and a re-read did not find the policy \
                 written; apply it again"
            ))),
            Err(e) => Err(Error::unresolved(format!(
                "the COMMIT of {WHAT} failed ({why}) and re-reading the policy failed ({e}); \
                 read it (`ctrlrun policy show`) and apply it again if needed"
            ))),
        }
    }
}

/// The rule of `action` in the transaction `tx`, if the store's policy has one.
pub(crate) fn rule_of<T: OversightTx>(
    tx: &mut T,
    action: &str,
) -> Result<Option<ActionRule>, T::Err> {
    Ok(tx.rules(Some(action))?.into_iter().next())
}
