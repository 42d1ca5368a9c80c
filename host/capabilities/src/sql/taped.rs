//! SQL calls on a tape (see `tape.rs`): statements, values, rows, dialects and errors as they
//! are written down and read back.
//!
//! Apart from the interface so that the tape's format for SQL is in one place; the interface
//! only says which calls go through the tape.

use serde_json::json;

use crate::tape::{self, DecodeError, FromDivergence, Taped};
use jobrelay_bindings::jobrelay::plugin::sql::{
    Dialect, Error as SqlError, Rows, Statement, Value,
};

/// `"mysql"` or `"sqlite"`.
impl Taped for Dialect {
    fn to_tape(&self) -> serde_json::Value {
        json!(match self {
            Dialect::Mysql => "mysql",
            Dialect::Sqlite => "sqlite",
        })
    }

    fn from_tape(value: &serde_json::Value) -> Result<Dialect, DecodeError> {
        match value.as_str() {
            Some("mysql") => Ok(Dialect::Mysql),
            Some("sqlite") => Ok(Dialect::Sqlite),
            _ => Err(DecodeError::Expected("\"mysql\" or \"sqlite\"")),
        }
    }
}

/// A statement on a tape: `{"sql": "...", "params": [...]}`.
impl Taped for Statement {
    fn to_tape(&self) -> serde_json::Value {
        let params: Vec<serde_json::Value> = self.params.iter().map(Taped::to_tape).collect();
        json!({ "sql": self.sql, "params": params })
    }

    fn from_tape(value: &serde_json::Value) -> Result<Statement, DecodeError> {
        Ok(Statement {
            sql: String::from_tape(tape::field(value, "sql")?)?,
            params: tape::list_from_tape(tape::field(value, "params")?, Value::from_tape)?,
        })
    }
}

/// A value on a tape: `null`, an integer, a number with a fraction (`2.0`), a string, or
/// `{"float": "NaN"}` for a float JSON cannot hold, `{"base64": "..."}` for a blob.
impl Taped for Value {
    fn to_tape(&self) -> serde_json::Value {
        match self {
            Value::Null => serde_json::Value::Null,
            Value::Int(v) => json!(v),
            Value::Float(v) if v.is_finite() => json!(v),
            Value::Float(v) => json!({ "float": v.to_string() }),
            Value::Text(v) => json!(v),
            Value::Blob(v) => tape::base64_to_tape(v),
        }
    }

    fn from_tape(value: &serde_json::Value) -> Result<Value, DecodeError> {
        use serde_json::Value as Json;
        match value {
            Json::Null => Ok(Value::Null),
            Json::Number(n) if n.is_i64() => Ok(Value::Int(n.as_i64().unwrap_or_default())),
            Json::Number(n) => n
                .as_f64()
                .map(Value::Float)
                .ok_or_else(|| DecodeError::NotAValue(n.to_string())),
            Json::String(text) => Ok(Value::Text(text.clone())),
            Json::Object(object) if object.contains_key("float") => object["float"]
                .as_str()
                .and_then(|f| f.parse().ok())
                .map(Value::Float)
                .ok_or(DecodeError::BadFloat),
            Json::Object(object) if object.contains_key("base64") => {
                tape::bytes_from_tape(value).map(Value::Blob)
            }
            other => Err(DecodeError::NotAValue(other.to_string())),
        }
    }
}

/// Rows on a tape: `{"columns": [...], "rows": [[...], ...]}`.
impl Taped for Rows {
    fn to_tape(&self) -> serde_json::Value {
        let rows: Vec<Vec<serde_json::Value>> = self
            .rows
            .iter()
            .map(|row| row.iter().map(Taped::to_tape).collect())
            .collect();
        json!({ "columns": self.columns, "rows": rows })
    }

    fn from_tape(value: &serde_json::Value) -> Result<Rows, DecodeError> {
        Ok(Rows {
            columns: tape::list_from_tape(tape::field(value, "columns")?, String::from_tape)?,
            rows: tape::list_from_tape(tape::field(value, "rows")?, |row| {
                tape::list_from_tape(row, Value::from_tape)
            })?,
        })
    }
}

/// `{"denied": "..."}`, `{"unavailable": "..."}` or `{"rejected": "..."}`.
impl Taped for SqlError {
    fn to_tape(&self) -> serde_json::Value {
        match self {
            SqlError::Denied(m) => tape::case_to_tape("denied", m),
            SqlError::Unavailable(m) => tape::case_to_tape("unavailable", m),
            SqlError::Rejected(m) => tape::case_to_tape("rejected", m),
        }
    }

    fn from_tape(value: &serde_json::Value) -> Result<SqlError, DecodeError> {
        match tape::case_from_tape(value)? {
            ("denied", m) => Ok(SqlError::Denied(m.into())),
            ("unavailable", m) => Ok(SqlError::Unavailable(m.into())),
            ("rejected", m) => Ok(SqlError::Rejected(m.into())),
            (other, _) => Err(DecodeError::UnknownCase {
                case: other.into(),
                of: "an sql error",
            }),
        }
    }
}

/// A diverged replay is answered as a statement the database refused: the plugin's error
/// path runs, and nothing retries it as a passing outage.
impl FromDivergence for SqlError {
    fn from_divergence(reason: String) -> SqlError {
        SqlError::Rejected(reason)
    }
}
