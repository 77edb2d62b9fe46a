//! The approver accounts, written once for both backends: each write one transaction with the
//! planner's row.

use super::tx::{OversightStore, OversightTx};
use crate::approval::ApproverRecord;
use crate::error::{Error, Result};
use crate::planner;
use crate::record::Micros;
use crate::store::api::Approvers;
use crate::store::recovery::Commit;

impl<S: OversightStore> Approvers for S {
    fn put_approver(
        &self,
        name: &str,
        secret_hash: &str,
        create: bool,
        now: Option<Micros>,
    ) -> Result<ApproverRecord> {
        let what = if create {
            "add_approver"
        } else {
            "set_approver_secret"
        };
        planner::check_approver_name(name)?;
        self.check_text(secret_hash)?;
        let fixed = self.fixed_now(now);
        let body = |tx: &mut S::Tx<'_>| -> Result<ApproverRecord> {
            let fail = |e| self.write_failed(what, name, e);
            let now = tx.clock(fixed).map_err(fail)?;
            // A new account is planned against every other (none may be the same name by
            // another spelling), with their writes held off until this one commits.
            let read = |tx: &mut S::Tx<'_>| {
                let only = if create { None } else { Some(name) };
                tx.approvers(only).map_err(fail)
            };
            if create {
                tx.hold_approvers().map_err(fail)?;
            }
            let row = planner::plan_approver(read(tx)?, name, secret_hash, create, now)?;
            if tx.put_approver(&row, create).map_err(fail)? != 1 {
                // Another process added (or removed) the account meanwhile.
                planner::plan_approver(read(tx)?, name, secret_hash, create, now)?;
                return Err(Error::StoreWriteFailed(format!(
                    "{what} for {name:?}: the account changed meanwhile; nothing was committed"
                )));
            }
            Ok(row)
        };
        match self.write((what, name), body)? {
            Commit::Landed(r) => Ok(r),
            Commit::Unknown(_, why) => Err(Error::unresolved(format!(
                "the COMMIT of {what} for {name:?} failed ({why}); read the account to see \
                 whether it landed"
            ))),
        }
    }

    fn get_approver(&self, name: &str) -> Result<Option<ApproverRecord>> {
        planner::check_approver_name(name)?;
        self.check_text(name)?;
        let found = self.read(("approvers", name), |tx| tx.approvers(Some(name)))?;
        let rows = found.map_err(|e| self.read_failed("approvers", e))?;
        Ok(rows.into_iter().next())
    }

    fn list_approvers(&self) -> Result<Vec<ApproverRecord>> {
        let found = self.read(("approvers", ""), |tx| tx.approvers(None))?;
        found.map_err(|e| self.read_failed("approvers", e))
    }

    fn remove_approver(&self, name: &str) -> Result<bool> {
        const WHAT: &str = "remove_approver";
        planner::check_approver_name(name)?;
        self.check_text(name)?;
        let body = |tx: &mut S::Tx<'_>| -> Result<bool> {
            let n = tx
                .delete_approver(name)
                .map_err(|e| self.write_failed(WHAT, name, e))?;
            Ok(n == 1)
        };
        match self.write((WHAT, name), body)? {
            Commit::Landed(r) => Ok(r),
            Commit::Unknown(_, why) => Err(Error::unresolved(format!(
                "the COMMIT of {WHAT} for {name:?} failed ({why}); list the approvers to see \
                 whether it landed"
            ))),
        }
    }
}
