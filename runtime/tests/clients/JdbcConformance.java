// The JDBC conformance suite: Apache Arrow's Flight SQL JDBC driver against a running lake, doing
// what DBeaver, BI tools and ETL jobs do.
//
// usage: java --add-opens=java.base/java.nio=ALL-UNNAMED -cp flight-sql-jdbc-driver.jar \
//          JdbcConformance.java QUERY_ENDPOINT METADATA_ENDPOINT [QUERY_TOKEN METADATA_TOKEN]
//        ... JdbcConformance.java --select-all QUERY_ENDPOINT SQL   (prints rows and seconds)
//
// Endpoints are grpc://host:port. Each check prints "ok <name>" or "FAIL <name>: <why>"; the last
// line is "<n> passed, <m> failed" and the exit status is non-zero when any failed. The first line
// names the namespace it works in ("namespace <ns>"); its table <ns>.batch, written by one
// executeBatch, is left for the caller to read with another client.

import java.math.BigDecimal;
import java.sql.Connection;
import java.sql.DatabaseMetaData;
import java.sql.Date;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.sql.Timestamp;
import java.sql.Types;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicReference;

public class JdbcConformance {
    interface Check {
        void run() throws Exception;
    }

    static int passed = 0;
    static int failed = 0;

    static void check(String name, Check check) {
        try {
            check.run();
            passed++;
            System.out.println("ok " + name);
        } catch (Throwable e) {
            failed++;
            System.out.println("FAIL " + name + ": " + e);
        }
    }

    static void expect(String what, Object got, Object want) {
        if (!String.valueOf(got).equals(String.valueOf(want))) {
            throw new AssertionError(what + ": got " + got + ", want " + want);
        }
    }

    /** An error whose message (or a cause's) says `what`: the failure expected, not another. */
    static void mentions(Throwable e, String what) {
        for (Throwable t = e; t != null; t = t.getCause()) {
            if (String.valueOf(t.getMessage()).toLowerCase().contains(what)) {
                return;
            }
        }
        throw new AssertionError("failed without saying \"" + what + "\": " + e);
    }

    /** Each column as type:precision:scale:schema.table ("-" for no table). */
    static String describe(java.sql.ResultSetMetaData md) throws SQLException {
        List<String> columns = new ArrayList<>();
        for (int i = 1; i <= md.getColumnCount(); i++) {
            String table = md.getTableName(i);
            String source = table == null || table.isEmpty() ? "-" : md.getSchemaName(i) + "." + table;
            columns.add(md.getColumnTypeName(i) + ":" + md.getPrecision(i) + ":" + md.getScale(i) + ":" + source);
        }
        return String.join(" ", columns);
    }

    static String url(String endpoint, String token) {
        String url = "jdbc:arrow-flight-sql://" + endpoint.replaceFirst("^grpc://", "") + "?useEncryption=false";
        return token == null ? url : url + "&token=" + token;
    }

    static Connection connect(String endpoint, String token) throws SQLException {
        return DriverManager.getConnection(url(endpoint, token), new Properties());
    }

    static long scalar(Connection c, String sql) throws SQLException {
        try (Statement s = c.createStatement(); ResultSet rs = s.executeQuery(sql)) {
            if (!rs.next()) {
                throw new AssertionError(sql + ": no row");
            }
            return rs.getLong(1);
        }
    }

    public static void main(String[] args) throws Exception {
        Class.forName("org.apache.arrow.driver.jdbc.ArrowFlightJdbcDriver");
        if (args.length == 3 && args[0].equals("--select-all")) {
            selectAll(args[1], args[2]);
            return;
        }
        if (args.length != 2 && args.length != 4) {
            System.out.println("usage: JdbcConformance QUERY_ENDPOINT METADATA_ENDPOINT [QUERY_TOKEN METADATA_TOKEN]");
            System.exit(2);
        }
        String queryToken = args.length > 2 ? args[2] : null;
        String metadataToken = args.length > 2 ? args[3] : null;
        String ns = "jdbc_" + System.nanoTime();
        System.out.println("namespace " + ns);
        try (Connection query = connect(args[0], queryToken); Connection meta = connect(args[1], metadataToken)) {
            suite(query, meta, ns, args[0], queryToken);
        }
        System.out.println(passed + " passed, " + failed + " failed");
        System.exit(failed > 0 ? 1 : 0);
    }

    /** Reads every row of `sql` through JDBC and prints "<rows> rows in <seconds> s". */
    static void selectAll(String endpoint, String sql) throws Exception {
        try (Connection c = connect(endpoint, null); Statement s = c.createStatement()) {
            long started = System.nanoTime();
            long rows = 0;
            long sum = 0;
            try (ResultSet rs = s.executeQuery(sql)) {
                int columns = rs.getMetaData().getColumnCount();
                while (rs.next()) {
                    rows++;
                    for (int i = 1; i <= columns; i++) {
                        sum += rs.getLong(i);
                    }
                }
            }
            double seconds = (System.nanoTime() - started) / 1e9;
            System.out.println(rows + " rows in " + seconds + " s (checksum " + sum + ")");
        }
    }

    static void suite(Connection query, Connection meta, String ns, String queryEndpoint, String token) {
        String t = ns + ".t";

        check("connect and SELECT 1 through Statement.executeQuery", () -> expect("SELECT 1", scalar(query, "SELECT 1"), 1));

        // Driver 18.3 sends the URL's `catalog` as a session option (SetSessionOptions); its
        // `schema` property arrives with driver 19.
        check("the URL's catalog is a session option: lake's is taken, another refused", () -> {
            Connection c = DriverManager.getConnection(url(queryEndpoint, token) + "&catalog=lake", new Properties());
            expect("SELECT 1 in catalog lake", scalar(c, "SELECT 1"), 1);
            try {
                c.close();
            } catch (SQLException e) {
                // With a catalog set, driver 18.3 closes its client twice: the second CloseSession
                // meets its own closed channel (apache/arrow-java#66, fixed by #910). Not lake's.
                mentions(e, "channel shutdown invoked");
            }
            try (Connection bad = DriverManager.getConnection(url(queryEndpoint, token) + "&catalog=nope", new Properties())) {
                throw new AssertionError("a connection in catalog nope was made");
            } catch (SQLException e) {
                mentions(e, "cannot set session option for catalog");
                mentions(e, "nope");
            }
        });

        if (token != null) {
            check("a connection without the token is refused", () -> {
                try (Connection c = connect(queryEndpoint, null)) {
                    scalar(c, "SELECT 1");
                    throw new AssertionError("a query without a token succeeded");
                } catch (SQLException e) {
                    if (!String.valueOf(e.getMessage()).toLowerCase().contains("unauthenticated")
                            && !String.valueOf(e.getCause()).toLowerCase().contains("unauthenticated")) {
                        throw new AssertionError("not UNAUTHENTICATED: " + e);
                    }
                }
            });
        }

        check("executeUpdate for DDL returns 0", () -> {
            try (Statement s = meta.createStatement()) {
                expect("CREATE SCHEMA", s.executeUpdate("CREATE SCHEMA " + ns), 0);
                expect("CREATE TABLE", s.executeUpdate("CREATE TABLE " + t
                        + " (id BIGINT, n INT, small SMALLINT, score DOUBLE, ratio REAL, name VARCHAR, ok BOOLEAN,"
                        + " day DATE, at TIMESTAMP, price DECIMAL(10, 2), tiny TINYINT, blob VARBINARY)"), 0);
            }
        });

        check("executeUpdate for DML returns the row count", () -> {
            try (Statement s = meta.createStatement()) {
                expect("INSERT", s.executeUpdate("INSERT INTO " + t + " (id, name) VALUES (1, 'tea'), (2, 'cake')"), 2);
                expect("DELETE", s.executeUpdate("DELETE FROM " + t + " WHERE id = 2"), 1);
            }
        });

        check("PreparedStatement binds a parameter of every type", () -> {
            try (PreparedStatement p = meta.prepareStatement("INSERT INTO " + t + " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")) {
                p.setLong(1, 3);
                p.setInt(2, 42);
                p.setShort(3, (short) 7);
                p.setDouble(4, 2.5);
                p.setFloat(5, 0.25f);
                p.setString(6, "jam");
                p.setBoolean(7, true);
                p.setDate(8, Date.valueOf("2024-02-29"));
                p.setTimestamp(9, Timestamp.valueOf("2024-02-29 12:34:56"));
                p.setBigDecimal(10, new BigDecimal("12.34"));
                p.setByte(11, (byte) -3);
                p.setBytes(12, new byte[] {(byte) 0xca, (byte) 0xfe});
                expect("rows", p.executeUpdate(), 1);
            }
            try (PreparedStatement p = query.prepareStatement(
                    "SELECT n, small, score, ratio, name, ok, day, at, price, tiny, blob FROM " + t + " WHERE id = ?")) {
                p.setLong(1, 3);
                try (ResultSet rs = p.executeQuery()) {
                    if (!rs.next()) {
                        throw new AssertionError("the bound row is not there");
                    }
                    String got = rs.getInt(1) + " " + rs.getShort(2) + " " + rs.getDouble(3) + " " + rs.getFloat(4)
                            + " " + rs.getString(5) + " " + rs.getBoolean(6) + " " + rs.getDate(7) + " "
                            + rs.getTimestamp(8) + " " + rs.getBigDecimal(9) + " " + rs.getByte(10) + " "
                            + java.util.HexFormat.of().formatHex(rs.getBytes(11));
                    expect("row", got, "42 7 2.5 0.25 jam true 2024-02-29 2024-02-29 12:34:56.0 12.34 -3 cafe");
                }
            }
        });

        check("PreparedStatement binds NULL", () -> {
            try (PreparedStatement p = meta.prepareStatement("INSERT INTO " + t + " (id, name) VALUES (?, ?)")) {
                p.setLong(1, 4);
                p.setNull(2, Types.VARCHAR);
                expect("rows", p.executeUpdate(), 1);
            }
            expect("NULL names", scalar(query, "SELECT count(*) FROM " + t + " WHERE id = 4 AND name IS NULL"), 1);
        });

        String b = ns + ".batch";
        check("executeBatch of 10,000 rows lands as one table version", () -> {
            try (Statement s = meta.createStatement()) {
                s.executeUpdate("CREATE TABLE " + b + " (id BIGINT, name VARCHAR)");
            }
            int[] counts;
            try (PreparedStatement p = meta.prepareStatement("INSERT INTO " + b + " VALUES (?, ?)")) {
                for (int i = 0; i < 10_000; i++) {
                    p.setLong(1, i);
                    p.setString(2, "row-" + i);
                    p.addBatch();
                }
                counts = p.executeBatch();
            }
            long total = 0;
            for (int c : counts) {
                total += c;
            }
            expect("rows counted by executeBatch", total, 10_000);
            expect("rows", scalar(query, "SELECT count(*) FROM " + b), 10_000);
            // Version 1 is the CREATE; the batch is version 2, and there is no version 3.
            expect("rows at version 2", scalar(query, "SELECT count(*) FROM " + ns + ".\"batch@v2\""), 10_000);
            try {
                scalar(query, "SELECT count(*) FROM " + ns + ".\"batch@v3\"");
                throw new AssertionError("the batch made more than one version");
            } catch (SQLException expected) {
                // One version: refused as a version that does not exist, not for another reason.
                mentions(expected, "version");
            }
        });

        check("time travel reads an earlier version", () -> {
            // Version 2 holds the first INSERT (ids 1 and 2); DELETE made version 3.
            expect("rows at version 2", scalar(query, "SELECT count(*) FROM " + ns + ".\"t@v2\""), 2);
            expect("rows now", scalar(query, "SELECT count(*) FROM " + t + " WHERE id IN (1, 2)"), 1);
        });

        // DBeaver and BI tools format a column by ResultSetMetaData: a DECIMAL(10,2) read as 0/0
        // before results carried the Flight SQL column metadata GetTables already had.
        check("ResultSetMetaData: type, precision, scale and table of result columns", () -> {
            String sql = "SELECT price, price * 2 AS doubled, name, at FROM " + t + " WHERE id = ?";
            String want = "DECIMAL:10:2:" + t + " DECIMAL:31:2:- VARCHAR:0:0:" + t + " TIMESTAMP:29:9:" + t;
            try (PreparedStatement p = query.prepareStatement(sql)) {
                expect("prepared", describe(p.getMetaData()), want);
                p.setLong(1, 3);
                try (ResultSet rs = p.executeQuery()) {
                    expect("prepared, executed", describe(rs.getMetaData()), want);
                }
            }
            try (Statement s = query.createStatement();
                    ResultSet rs = s.executeQuery(sql.replace("?", "3"))) {
                expect("statement", describe(rs.getMetaData()), want);
            }
        });

        check("DatabaseMetaData: product, catalogs, schemas", () -> {
            DatabaseMetaData md = query.getMetaData();
            expect("product name", md.getDatabaseProductName(), "lake");
            if (md.getDatabaseProductVersion() == null || md.getDatabaseProductVersion().isEmpty()) {
                throw new AssertionError("no product version");
            }
            List<String> catalogs = new ArrayList<>();
            try (ResultSet rs = md.getCatalogs()) {
                while (rs.next()) {
                    catalogs.add(rs.getString("TABLE_CAT"));
                }
            }
            expect("catalogs", catalogs, List.of("lake"));
            boolean found = false;
            try (ResultSet rs = md.getSchemas("lake", ns)) {
                while (rs.next()) {
                    found |= rs.getString("TABLE_SCHEM").equals(ns);
                }
            }
            expect("schema " + ns + " listed", found, true);
        });

        check("DatabaseMetaData.getTables with patterns", () -> {
            List<String> tables = new ArrayList<>();
            try (ResultSet rs = query.getMetaData().getTables("lake", ns, "%", null)) {
                while (rs.next()) {
                    tables.add(rs.getString("TABLE_NAME") + ":" + rs.getString("TABLE_TYPE"));
                }
            }
            expect("tables", tables, List.of("batch:TABLE", "t:TABLE"));
            tables.clear();
            try (ResultSet rs = query.getMetaData().getTables("lake", ns, "b%", new String[] {"TABLE"})) {
                while (rs.next()) {
                    tables.add(rs.getString("TABLE_NAME"));
                }
            }
            expect("tables like b%", tables, List.of("batch"));
        });

        check("DatabaseMetaData.getColumns: types, precision, nullability", () -> {
            List<String> columns = new ArrayList<>();
            try (ResultSet rs = query.getMetaData().getColumns("lake", ns, "t", "%")) {
                while (rs.next()) {
                    columns.add(rs.getString("COLUMN_NAME") + ":" + rs.getInt("DATA_TYPE") + ":" + rs.getString("TYPE_NAME")
                            + ":" + rs.getInt("COLUMN_SIZE") + ":" + rs.getInt("DECIMAL_DIGITS") + ":" + rs.getInt("NULLABLE"));
                }
            }
            expect("columns", String.join(" ", columns),
                    "id:-5:BIGINT:19:0:1 n:4:INTEGER:10:0:1 small:5:SMALLINT:5:0:1 score:8:DOUBLE:15:0:1"
                            + " ratio:6:REAL:7:0:1 name:12:VARCHAR:65536:0:1 ok:16:BOOLEAN:1:0:1 day:91:DATE:10:0:1"
                            + " at:93:TIMESTAMP:29:9:1 price:3:DECIMAL:10:2:1 tiny:-6:TINYINT:3:0:1 blob:-3:VARBINARY:65536:0:1");
        });

        check("DatabaseMetaData: primary, imported, exported and cross-reference keys, type info, keywords", () -> {
            DatabaseMetaData md = query.getMetaData();
            try (ResultSet rs = md.getPrimaryKeys("lake", ns, "t")) {
                expect("primary keys", rs.next(), false);
            }
            // What DBeaver asks when it browses a table: no foreign keys, and no error.
            try (ResultSet rs = md.getImportedKeys("lake", ns, "t")) {
                expect("imported keys", rs.next(), false);
            }
            try (ResultSet rs = md.getExportedKeys("lake", ns, "t")) {
                expect("exported keys", rs.next(), false);
            }
            try (ResultSet rs = md.getCrossReference("lake", ns, "t", "lake", ns, "t")) {
                expect("cross reference", rs.next(), false);
            }
            try (ResultSet rs = md.getTypeInfo()) {
                while (rs.next()) {
                    rs.getString("TYPE_NAME");
                }
            }
            String keywords = md.getSQLKeywords();
            if (keywords == null || !keywords.toUpperCase().contains("SELECT")) {
                throw new AssertionError("keywords: " + keywords);
            }
        });

        // Every DatabaseMetaData method DBeaver calls when it connects (JDBCDataSourceInfo,
        // JDBCSQLDialect) and when it browses a table; driver 18.3 threw NullPointerException on
        // each one whose SqlInfo the server left out.
        check("DatabaseMetaData: what DBeaver reads on connect", () -> {
            for (Connection c : List.of(query, meta)) {
                DatabaseMetaData md = c.getMetaData();
                List<String> broken = new ArrayList<>();
                Check[] calls = {
                    md::getDriverName, md::getDriverVersion, md::getDatabaseMajorVersion, md::getDatabaseMinorVersion,
                    md::getIdentifierQuoteString, md::getSQLKeywords, md::getNumericFunctions, md::getStringFunctions,
                    md::getSystemFunctions, md::getTimeDateFunctions, md::getSearchStringEscape,
                    md::getExtraNameCharacters, md::getSchemaTerm, md::getProcedureTerm, md::getCatalogTerm,
                    md::getCatalogSeparator, md::isCatalogAtStart, md::isReadOnly,
                    md::supportsSchemasInTableDefinitions, md::supportsSchemasInDataManipulation,
                    md::supportsSchemasInIndexDefinitions, md::supportsSchemasInProcedureCalls,
                    md::supportsCatalogsInTableDefinitions, md::supportsCatalogsInDataManipulation,
                    md::supportsCatalogsInIndexDefinitions, md::supportsMixedCaseIdentifiers,
                    md::supportsMixedCaseQuotedIdentifiers, md::storesLowerCaseIdentifiers,
                    md::storesUpperCaseIdentifiers, md::storesMixedCaseIdentifiers,
                    md::storesLowerCaseQuotedIdentifiers, md::storesUpperCaseQuotedIdentifiers,
                    md::storesMixedCaseQuotedIdentifiers, md::supportsTransactions, md::getDefaultTransactionIsolation,
                    md::supportsSavepoints, md::supportsBatchUpdates, md::supportsMultipleResultSets,
                    md::supportsStoredProcedures, md::supportsGetGeneratedKeys, md::getMaxColumnNameLength,
                    md::getMaxTableNameLength, md::getMaxSchemaNameLength, md::getMaxCatalogNameLength,
                    md::getMaxStatementLength, md::getMaxConnections, md::getMaxRowSize, md::getSQLStateType,
                    md::supportsNamedParameters, md::supportsStoredFunctionsUsingCallSyntax,
                    md::dataDefinitionCausesTransactionCommit, md::dataDefinitionIgnoredInTransactions,
                    md::supportsOuterJoins, md::supportsFullOuterJoins, md::supportsLimitedOuterJoins,
                    md::supportsUnion, md::supportsUnionAll, md::supportsGroupBy, md::supportsGroupByUnrelated,
                    md::supportsConvert, md::nullPlusNonNullIsNull, md::supportsColumnAliasing,
                    md::supportsLikeEscapeClause, md::supportsSubqueriesInComparisons, md::supportsSubqueriesInExists,
                    md::supportsSubqueriesInIns, md::supportsSubqueriesInQuantifieds, md::supportsCorrelatedSubqueries,
                    md::supportsANSI92EntryLevelSQL, md::supportsANSI92IntermediateSQL, md::supportsANSI92FullSQL,
                    md::supportsMinimumSQLGrammar, md::supportsCoreSQLGrammar, md::supportsExtendedSQLGrammar,
                    md::supportsIntegrityEnhancementFacility, md::supportsPositionedDelete,
                    md::supportsPositionedUpdate, md::supportsSelectForUpdate, md::getMaxBinaryLiteralLength,
                    md::getMaxCharLiteralLength, md::getMaxColumnsInGroupBy, md::getMaxColumnsInIndex,
                    md::getMaxColumnsInOrderBy, md::getMaxColumnsInSelect, md::getMaxColumnsInTable,
                    md::getMaxCursorNameLength, md::getMaxIndexLength, md::getMaxProcedureNameLength,
                    md::doesMaxRowSizeIncludeBlobs, md::getMaxStatements, md::getMaxTablesInSelect,
                    md::getMaxUserNameLength, md::locatorsUpdateCopy, md::supportsTableCorrelationNames,
                    md::supportsDifferentTableCorrelationNames, md::supportsExpressionsInOrderBy,
                    md::supportsOrderByUnrelated, md::supportsNonNullableColumns,
                    md::supportsSchemasInPrivilegeDefinitions, md::supportsCatalogsInPrivilegeDefinitions,
                    () -> md.supportsResultSetType(ResultSet.TYPE_FORWARD_ONLY),
                    () -> md.supportsResultSetType(ResultSet.TYPE_SCROLL_INSENSITIVE),
                    () -> md.supportsTransactionIsolationLevel(Connection.TRANSACTION_NONE),
                    () -> md.supportsTransactionIsolationLevel(Connection.TRANSACTION_SERIALIZABLE),
                    () -> md.supportsConvert(Types.INTEGER, Types.VARCHAR),
                    () -> md.getTableTypes().close(),
                };
                for (int i = 0; i < calls.length; i++) {
                    try {
                        calls[i].run();
                    } catch (Throwable e) {
                        broken.add("call " + i + ": " + e);
                    }
                }
                expect("DatabaseMetaData calls that threw", broken, List.of());
            }
        });

        // The values BI tools (Tableau's JDBC connector, Power BI through the Flight SQL ODBC
        // driver, which reads the same SqlInfo ids) plan their SQL by: true answers, not defaults.
        check("DatabaseMetaData: the SqlInfo values BI tools plan by", () -> {
            DatabaseMetaData md = query.getMetaData();
            expect("supportsTransactions", md.supportsTransactions(), false);
            expect("default isolation", md.getDefaultTransactionIsolation(), Connection.TRANSACTION_NONE);
            expect("isolation NONE", md.supportsTransactionIsolationLevel(Connection.TRANSACTION_NONE), true);
            expect("isolation SERIALIZABLE",
                    md.supportsTransactionIsolationLevel(Connection.TRANSACTION_SERIALIZABLE), false);
            expect("max table name length", md.getMaxTableNameLength(), 128);
            expect("max schema name length", md.getMaxSchemaNameLength(), 128);
            expect("max statement length", md.getMaxStatementLength(), 1024 * 1024);
            expect("max column name length (no limit)", md.getMaxColumnNameLength(), 0);
            expect("forward-only results", md.supportsResultSetType(ResultSet.TYPE_FORWARD_ONLY), true);
            expect("scrollable results", md.supportsResultSetType(ResultSet.TYPE_SCROLL_INSENSITIVE), false);
            expect("UNION ALL", md.supportsUnionAll(), true);
            expect("FULL OUTER JOIN", md.supportsFullOuterJoins(), true);
            expect("GROUP BY unrelated", md.supportsGroupByUnrelated(), true);
            expect("correlated subqueries", md.supportsCorrelatedSubqueries(), true);
            expect("quantified subqueries", md.supportsSubqueriesInQuantifieds(), true);
            expect("ANSI92 entry level", md.supportsANSI92EntryLevelSQL(), true);
            expect("CAST integer to varchar", md.supportsConvert(Types.INTEGER, Types.VARCHAR), true);
            expect("CAST varchar to timestamp", md.supportsConvert(Types.VARCHAR, Types.TIMESTAMP), true);
            expect("CAST date to time", md.supportsConvert(Types.DATE, Types.TIME), false);
            expect("batch updates on the read-only endpoint", md.supportsBatchUpdates(), false);
            expect("batch updates on the metadata endpoint", meta.getMetaData().supportsBatchUpdates(), true);
            expect("savepoints", md.supportsSavepoints(), false);
        });

        check("a bad statement is an SQLException naming it", () -> {
            try (Statement s = query.createStatement()) {
                s.executeQuery("SELEC 1");
                throw new AssertionError("SELEC 1 succeeded");
            } catch (SQLException e) {
                String all = e.getMessage() + " " + e.getCause();
                if (!all.contains("SELEC")) {
                    throw new AssertionError("the message does not name the SQL: " + all);
                }
            }
        });

        check("a write on the query endpoint is refused, naming the metadata endpoint", () -> {
            try (Statement s = query.createStatement()) {
                s.executeUpdate("DROP TABLE " + t);
                throw new AssertionError("DROP TABLE on query succeeded");
            } catch (SQLException e) {
                String all = e.getMessage() + " " + e.getCause();
                if (!all.contains("metadata endpoint")) {
                    throw new AssertionError(all);
                }
            }
        });

        check("Statement.cancel ends a running query as cancelled", () -> {
            AtomicReference<Throwable> outcome = new AtomicReference<>();
            Statement s = query.createStatement();
            Thread running = new Thread(() -> {
                try (ResultSet rs = s.executeQuery(
                        "SELECT count(*) FROM generate_series(1, 100000000) a, generate_series(1, 1000) b")) {
                    rs.next();
                    outcome.set(new AssertionError("the query finished: " + rs.getLong(1)));
                } catch (Throwable e) {
                    outcome.set(e);
                }
            });
            running.start();
            // The driver cancels only a DoGet it has opened: a cancel() while it still prepares
            // the statement or waits for GetFlightInfo (seconds, on a loaded machine) is lost.
            // A user calls it again, as here, until the query ends.
            Thread.sleep(1000);
            long deadline = System.nanoTime() + 20_000_000_000L;
            while (running.isAlive() && System.nanoTime() < deadline) {
                s.cancel();
                running.join(500);
            }
            if (running.isAlive()) {
                throw new AssertionError("the query still runs 20 s after cancel()");
            }
            if (outcome.get() instanceof AssertionError) {
                throw (AssertionError) outcome.get();
            }
            // Stopped by the cancel, not by some other failure.
            String why = String.valueOf(outcome.get()) + " " + String.valueOf(outcome.get().getCause());
            if (!why.toLowerCase().contains("cancel")) {
                throw new AssertionError("the query ended, but not cancelled: " + why);
            }
            s.close();
            expect("the endpoint answers after the cancel", scalar(query, "SELECT 1"), 1);
        });

        check("DROP TABLE through executeUpdate", () -> {
            try (Statement s = meta.createStatement()) {
                expect("DROP TABLE", s.executeUpdate("DROP TABLE " + t), 0);
            }
            try {
                scalar(query, "SELECT count(*) FROM " + t);
                throw new AssertionError("the dropped table is still readable");
            } catch (SQLException expected) {
                // Gone: not found, not some other failure.
                mentions(expected, "not found");
            }
        });
    }
}
