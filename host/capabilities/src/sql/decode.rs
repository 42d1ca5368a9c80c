//! Columns as plugin values, one decoding per dialect.
//!
//! Apart from running statements because this is where the two databases' type systems meet
//! the WIT `value`: MySQL types each column and its driver checks types strictly, SQLite types
//! each value. What has no plugin value is refused with a hint to CAST it.

use sqlx::mysql::MySqlRow;
use sqlx::sqlite::SqliteRow;
use sqlx::{Column, Row, ValueRef};

use super::driver::classify;
use jobrelay_bindings::jobrelay::plugin::sql::{Error as SqlError, Value};

/// A MySQL column as a WIT value. The driver checks types strictly, so the decodings are tried
/// from the most to the least specific; temporal types come back as text.
pub(super) fn decode_mysql(row: &MySqlRow, index: usize) -> Result<Value, SqlError> {
    let raw = row.try_get_raw(index).map_err(classify)?;
    if raw.is_null() {
        return Ok(Value::Null);
    }
    if let Ok(v) = row.try_get::<i64, _>(index) {
        return Ok(Value::Int(v));
    }
    if let Ok(v) = row.try_get::<u64, _>(index) {
        return Ok(i64::try_from(v).map_or_else(|_| Value::Text(v.to_string()), Value::Int));
    }
    if let Ok(v) = row.try_get::<f64, _>(index) {
        return Ok(Value::Float(v));
    }
    if let Ok(v) = row.try_get::<f32, _>(index) {
        return Ok(Value::Float(f64::from(v)));
    }
    if let Ok(v) = row.try_get::<bool, _>(index) {
        return Ok(Value::Int(i64::from(v)));
    }
    if let Ok(v) = row.try_get::<String, _>(index) {
        return Ok(Value::Text(v));
    }
    if let Ok(v) = row.try_get::<chrono::NaiveDateTime, _>(index) {
        return Ok(Value::Text(v.format("%Y-%m-%d %H:%M:%S%.f").to_string()));
    }
    if let Ok(v) = row.try_get::<chrono::DateTime<chrono::Utc>, _>(index) {
        return Ok(Value::Text(v.format("%Y-%m-%d %H:%M:%S%.f").to_string()));
    }
    if let Ok(v) = row.try_get::<chrono::NaiveDate, _>(index) {
        return Ok(Value::Text(v.to_string()));
    }
    if let Ok(v) = row.try_get::<Vec<u8>, _>(index) {
        return Ok(Value::Blob(v));
    }
    Err(unsupported(
        row.columns()[index].name(),
        &row.columns()[index].type_info().to_string(),
    ))
}

/// An SQLite value as a WIT value (SQLite types each value, not each column).
pub(super) fn decode_sqlite(row: &SqliteRow, index: usize) -> Result<Value, SqlError> {
    let raw = row.try_get_raw(index).map_err(classify)?;
    if raw.is_null() {
        return Ok(Value::Null);
    }
    let type_name = raw.type_info().to_string();
    let value = match type_name.as_str() {
        "INTEGER" | "BOOLEAN" | "INT8" => row.try_get::<i64, _>(index).map(Value::Int),
        "REAL" => row.try_get::<f64, _>(index).map(Value::Float),
        "BLOB" => row.try_get::<Vec<u8>, _>(index).map(Value::Blob),
        _ => row.try_get::<String, _>(index).map(Value::Text),
    };
    value.map_err(|_| unsupported(row.columns()[index].name(), &type_name))
}

fn unsupported(column: &str, type_name: &str) -> SqlError {
    SqlError::Rejected(format!(
        "column `{column}` has type {type_name}, which has no plugin value; CAST it to a \
         number or text in the query"
    ))
}
