//! The plugins' key-value entries (the `kv` capability's storage), written once over a
//! [`Dialect`] as the rest of [`SqlStore`] is.
//!
//! Apart from [`sql_store`](super::sql_store) because it is another trait with its own
//! table, and shares nothing with the delivery path but the store's pool, its error mapping and
//! its deadlock retry. Expiry is judged by the database's clock ([`Dialect::NOW`]), so replicas
//! whose clocks differ still agree on what expired.

use async_trait::async_trait;

use super::dialect::{Dialect, Kind, Statement, Value};
use super::error::StoreError;
use super::sql_store::{SqlStore, retry_deadlocks};
use super::store::PluginKv;

#[async_trait]
impl<D: Dialect> PluginKv for SqlStore<D> {
    async fn kv_get(&self, plugin: &str, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let statement = Statement::new(&self.sql.kv_get).text(plugin).text(key);
        let rows = self
            .fetch(statement, &[Kind::Bytes], "read a plugin key", "plugin key")
            .await?;
        Ok(
            match rows.into_iter().next().and_then(|r| r.into_iter().next()) {
                Some(Value::Bytes(value)) => Some(value),
                _ => None,
            },
        )
    }

    async fn kv_set(
        &self,
        plugin: &str,
        key: &str,
        value: &[u8],
        ttl_seconds: Option<u32>,
    ) -> Result<(), StoreError> {
        let statement = Statement::new(&self.sql.kv_set)
            .text(plugin)
            .text(key)
            .bytes(value)
            .opt_int(ttl_seconds.map(i64::from));
        retry_deadlocks!(self.execute(statement.clone(), "write a plugin key").await)?;
        // Expired entries go a few at a time with each write, so the table never needs a
        // sweeper task and a write never pays for a large backlog at once. The entry is
        // committed already and the next write sweeps again, so a failed sweep is not the
        // caller's failure.
        let sweep = Statement::new(&self.sql.kv_sweep);
        if let Err(e) = retry_deadlocks!(
            self.execute(sweep.clone(), "remove expired plugin keys")
                .await
        ) {
            tracing::debug!(error = %e, "sweeping expired plugin keys failed");
        }
        Ok(())
    }

    async fn kv_usage(&self, plugin: &str, except_key: &str) -> Result<(u64, u64), StoreError> {
        let statement = Statement::new(&self.sql.kv_usage)
            .text(plugin)
            .text(except_key);
        let rows = self
            .fetch(
                statement,
                &[Kind::Int, Kind::Int],
                "measure a plugin's keys",
                "plugin key usage",
            )
            .await?;
        match rows.into_iter().next().as_deref() {
            Some([Value::Int(entries), Value::Int(bytes)]) => {
                Ok(((*entries).max(0) as u64, (*bytes).max(0) as u64))
            }
            _ => Err(self.failed("measure a plugin's keys")(
                sqlx::Error::RowNotFound,
            )),
        }
    }

    async fn kv_entries(&self, plugin: &str) -> Result<Vec<(String, Vec<u8>)>, StoreError> {
        let statement = Statement::new(&self.sql.kv_entries).text(plugin);
        let rows = self
            .fetch(
                statement,
                &[Kind::Text, Kind::Bytes],
                "read the host's keys",
                "plugin key",
            )
            .await?;
        Ok(rows
            .into_iter()
            .filter_map(|row| match <[Value; 2]>::try_from(row) {
                Ok([Value::Text(key), Value::Bytes(value)]) => Some((key, value)),
                _ => None,
            })
            .collect())
    }

    async fn kv_delete(&self, plugin: &str, key: &str) -> Result<bool, StoreError> {
        let statement = Statement::new(&self.sql.kv_delete).text(plugin).text(key);
        let done = retry_deadlocks!(self.execute(statement.clone(), "delete a plugin key").await)?;
        Ok(done.rows_affected > 0)
    }
}
