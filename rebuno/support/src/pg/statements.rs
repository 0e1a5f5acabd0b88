//! Prepared statements per connection: [`Statements`] keeps what a connection has prepared,
//! [`Cached`] runs typed statements through it.

use postgres::types::{ToSql, Type};

/// The statements a connection has prepared, by SQL text: a statement sent through
/// [`Statements::prepared`] is parsed and planned once per connection, then only bound and
/// executed (a statement sent as text is parsed and planned anew every time, which costs more
/// than the round trip for anything that reads a table). At most [`Statements::CAPACITY`]
/// are kept; past that the cache starts again.
#[derive(Default)]
pub struct Statements {
    by_sql: std::collections::HashMap<String, postgres::Statement>,
}

impl Statements {
    /// Statements kept per connection.
    pub const CAPACITY: usize = 256;

    /// The prepared statement for `sql` with parameter `types`, preparing it on `client` the
    /// first time (one round trip). A statement's text names its parameter types for good:
    /// call sites pass the same `types` for the same `sql`.
    pub fn prepared(
        &mut self,
        client: &mut impl postgres::GenericClient,
        sql: &str,
        types: &[Type],
    ) -> Result<postgres::Statement, postgres::Error> {
        if let Some(statement) = self.by_sql.get(sql) {
            return Ok(statement.clone());
        }
        let statement = client.prepare_typed(sql, types)?;
        if self.by_sql.len() >= Self::CAPACITY {
            self.by_sql.clear();
        }
        self.by_sql.insert(sql.to_owned(), statement.clone());
        Ok(statement)
    }

    /// How many statements are kept.
    pub fn len(&self) -> usize {
        self.by_sql.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.by_sql.is_empty()
    }
}

/// A statement parameter with its type.
pub type Param<'p> = (&'p (dyn ToSql + Sync), Type);

/// A client or transaction with its connection's prepared [`Statements`]: the `*_typed`
/// calls of the `postgres` crate, each statement prepared once per connection.
pub struct Cached<'a, C> {
    client: &'a mut C,
    statements: &'a mut Statements,
}

impl<'a, C: postgres::GenericClient> Cached<'a, C> {
    /// `client` with `statements`, the prepared statements of its connection.
    pub fn new(client: &'a mut C, statements: &'a mut Statements) -> Self {
        Cached { client, statements }
    }

    fn prepare<'p>(
        &mut self,
        sql: &str,
        params: &[Param<'p>],
    ) -> Result<(postgres::Statement, Vec<&'p (dyn ToSql + Sync)>), postgres::Error> {
        let types: Vec<Type> = params.iter().map(|(_, t)| t.clone()).collect();
        let statement = self.statements.prepared(self.client, sql, &types)?;
        Ok((statement, params.iter().map(|(v, _)| *v).collect()))
    }

    /// The rows `sql` returns.
    pub fn query_typed(
        &mut self,
        sql: &str,
        params: &[Param<'_>],
    ) -> Result<Vec<postgres::Row>, postgres::Error> {
        let (statement, values) = self.prepare(sql, params)?;
        self.client.query(&statement, &values)
    }

    /// The one row `sql` returns (an error if it returns none or several).
    pub fn query_typed_one(
        &mut self,
        sql: &str,
        params: &[Param<'_>],
    ) -> Result<postgres::Row, postgres::Error> {
        let (statement, values) = self.prepare(sql, params)?;
        self.client.query_one(&statement, &values)
    }

    /// The rows `sql` returns, as they arrive from the server (a caller may stop early).
    pub fn query_typed_raw(
        &mut self,
        sql: &str,
        params: &[Param<'_>],
    ) -> Result<postgres::RowIter<'_>, postgres::Error> {
        let (statement, values) = self.prepare(sql, params)?;
        self.client.query_raw(&statement, values)
    }

    /// Runs `sql`; answers the rows it changed.
    pub fn execute_typed(
        &mut self,
        sql: &str,
        params: &[Param<'_>],
    ) -> Result<u64, postgres::Error> {
        let (statement, values) = self.prepare(sql, params)?;
        self.client.execute(&statement, &values)
    }
}
