//! The same calls for plugins built against `jobrelay:plugin@0.1.0`: each forwards to the
//! current interface, converting types, so grants, limits and tapes exist once.
//!
//! Apart so that the older version is kept, and one day dropped, in one place (with its line
//! in `add_to_linker`).

use super::SqlAccess;
use jobrelay_bindings::jobrelay::plugin::sql as wit;
use jobrelay_bindings::v0_1::jobrelay::plugin::sql as older;

impl older::Host for SqlAccess {
    async fn connection_dialect(
        &mut self,
        connection: String,
    ) -> Result<older::Dialect, older::Error> {
        wit::Host::connection_dialect(self, connection)
            .await
            .map(Into::into)
            .map_err(Into::into)
    }

    async fn execute(
        &mut self,
        connection: String,
        statement: older::Statement,
    ) -> Result<u64, older::Error> {
        wit::Host::execute(self, connection, statement.into())
            .await
            .map_err(Into::into)
    }

    async fn query(
        &mut self,
        connection: String,
        statement: older::Statement,
    ) -> Result<older::Rows, older::Error> {
        wit::Host::query(self, connection, statement.into())
            .await
            .map(Into::into)
            .map_err(Into::into)
    }

    async fn transaction(
        &mut self,
        connection: String,
        statements: Vec<older::Statement>,
    ) -> Result<Vec<u64>, older::Error> {
        let statements = statements.into_iter().map(Into::into).collect();
        wit::Host::transaction(self, connection, statements)
            .await
            .map_err(Into::into)
    }
}
