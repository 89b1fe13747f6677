//! The bytes of values on their way to the bucket. Read ahead of the claim check, they
//! are bounded by bytes, not by batches: twenty batches of 50 MB rows are 1 GB. The
//! reader takes a batch's cost before handing it over; the claim check gives it back
//! once the values are written and only their references remain.

use std::sync::Arc;

use tokio::sync::Semaphore;

use crate::route::Record;

/// `claim_check.max_pending_bytes`, counted in KiB.
#[derive(Clone, Debug)]
pub struct ValueBudget {
    permits: Arc<Semaphore>,
    max_kib: u32,
}

impl ValueBudget {
    /// A budget of `max_bytes` (at least 1 KiB).
    pub fn new(max_bytes: usize) -> Self {
        let max_kib = u32::try_from(max_bytes.div_ceil(1024))
            .unwrap_or(u32::MAX >> 3)
            .clamp(1, Semaphore::MAX_PERMITS.min(u32::MAX as usize) as u32);
        Self {
            permits: Arc::new(Semaphore::new(max_kib as usize)),
            max_kib,
        }
    }

    /// What `records` cost: the KiB of the values they send to the bucket, at most the
    /// whole budget (a larger value goes alone).
    pub fn cost(&self, records: &[Record]) -> u32 {
        let bytes: usize = records
            .iter()
            .filter(|r| r.claim_check)
            .filter_map(|r| r.value.as_ref().map(Vec::len))
            .sum();
        u32::try_from(bytes.div_ceil(1024))
            .unwrap_or(u32::MAX)
            .min(self.max_kib)
    }

    /// Waits until `cost` fits.
    pub async fn take(&self, cost: u32) {
        if cost > 0 {
            self.permits
                .acquire_many(cost)
                .await
                .expect("the budget is never closed")
                .forget();
        }
    }

    /// Waits while the budget is spent. The reader asks before it reads on: a 50 MB row
    /// read while another is still with the bucket would be a second one held whole
    /// (with the binlog event it came in, a third).
    pub async fn room(&self) {
        let permit = self
            .permits
            .acquire()
            .await
            .expect("the budget is never closed");
        drop(permit);
    }

    /// Gives `cost` back: its values are written.
    pub fn give_back(&self, cost: u32) {
        self.permits.add_permits(cost as usize);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_value_larger_than_the_budget_goes_alone() {
        let budget = ValueBudget::new(64 << 10);
        budget.take(64).await;
        let second = tokio::time::timeout(std::time::Duration::from_millis(50), budget.take(1));
        assert!(second.await.is_err(), "over the budget");
        budget.give_back(64);
        budget.take(64).await;
    }

    #[tokio::test]
    async fn reading_waits_while_the_budget_is_spent() {
        let budget = ValueBudget::new(16 << 10);
        budget.take(15).await;
        budget.room().await; // 1 KiB left: room
        budget.take(1).await;
        let wait = tokio::time::timeout(std::time::Duration::from_millis(50), budget.room());
        assert!(wait.await.is_err(), "spent: no room");
        budget.give_back(1);
        budget.room().await;
    }
}
