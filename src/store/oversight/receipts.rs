//! Reading and verifying receipts, written once for both backends (the triggers of schema
//! version 4 write them: see [`crate::receipt`]).

use super::tx::{OversightStore, OversightTx};
use crate::error::Result;
use crate::receipt::{Receipt, Verification, Verifier};
use crate::store::api::Receipts;

/// How many receipts a verification reads at a time: a large store is never held in memory
/// at once.
const PAGE: usize = 5000;

impl<S: OversightStore> Receipts for S {
    fn list_receipts(&self, key: Option<&str>, limit: Option<u64>) -> Result<Vec<Receipt>> {
        key.map(|k| self.check_text(k)).transpose()?;
        let mut found = self
            .read(("receipts", ""), |tx| tx.latest_receipts(key, limit))?
            .map_err(|e| self.read_failed("receipts", e))?;
        found.reverse();
        Ok(found)
    }

    fn verify_receipts(&self) -> Result<Verification> {
        verify(self)
    }

    fn verify_key_receipts(&self, key: &str) -> Result<Verification> {
        self.check_text(key)?;
        let found = self.snapshot(|tx| {
            let heads = tx.receipt_heads(Some(key))?;
            let mut receipts = tx.latest_receipts(Some(key), None)?;
            receipts.reverse(); // oldest first, as the verifier reads them
            let mut verifier = Verifier::new();
            for receipt in &receipts {
                verifier.add(receipt);
            }
            Ok(verifier.finish(heads))
        })?;
        found.map_err(|e| self.read_failed("receipts", e))
    }
}

/// The heads and every receipt, from one snapshot.
fn verify<S: OversightStore>(s: &S) -> Result<Verification> {
    let found = s.snapshot(|tx| {
        let heads = tx.receipt_heads(None)?;
        let mut verifier = Verifier::new();
        let mut after: Option<i64> = None;
        loop {
            let page = tx.receipts_after(after, PAGE)?;
            for receipt in &page {
                after = Some(receipt.id);
                verifier.add(receipt);
            }
            if page.len() < PAGE || (S::VERIFY_STOPS_AT_BREAK && verifier.is_broken()) {
                break;
            }
        }
        Ok(verifier.finish(heads))
    })?;
    found.map_err(|e| s.read_failed("receipts", e))
}
