// The Go database/sql conformance suite: arrow-go's Flight SQL driver against a running lake.
//
// usage: gosql QUERY_ENDPOINT METADATA_ENDPOINT [QUERY_TOKEN METADATA_TOKEN]
//        gosql search QUERY_ENDPOINT SQL VECTOR
//
// Endpoints are grpc://host:port. Each check prints "ok <name>" or "FAIL <name>: <why>"; the last
// line is "<n> passed, <m> failed" and the exit status is non-zero when any failed.
package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"os"
	"strings"
	"time"

	_ "github.com/apache/arrow-go/v18/arrow/flight/flightsql/driver"
)

var passed, failed int

func check(name string, fn func() error) {
	if err := fn(); err != nil {
		failed++
		fmt.Printf("FAIL %s: %v\n", name, err)
		return
	}
	passed++
	fmt.Printf("ok %s\n", name)
}

func dsn(endpoint, token string) string {
	d := "flightsql://" + strings.TrimPrefix(endpoint, "grpc://")
	if token != "" {
		d += "?token=" + token
	}
	return d
}

func open(endpoint, token string) *sql.DB {
	db, err := sql.Open("flightsql", dsn(endpoint, token))
	if err != nil {
		fmt.Printf("FAIL open %s: %v\n", endpoint, err)
		os.Exit(1)
	}
	return db
}

func expect(what string, got, want any) error {
	if fmt.Sprint(got) != fmt.Sprint(want) {
		return fmt.Errorf("%s: got %v, want %v", what, got, want)
	}
	return nil
}

// exec runs a statement and checks its affected-row count (-1: not checked).
func exec(db *sql.DB, want int64, query string, args ...any) error {
	res, err := db.Exec(query, args...)
	if err != nil {
		return fmt.Errorf("%s: %w", query, err)
	}
	if want < 0 {
		return nil
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("%s: RowsAffected: %w", query, err)
	}
	return expect(query+" rows affected", n, want)
}

// search runs SQL (one parameter: the query vector as comma-separated text, which Go's
// database/sql can bind) and prints the first column of each row, then "index <true|false>":
// whether EXPLAIN of the same bound statement shows Lance's ANN nodes.
func search(endpoint, query, vector string) {
	db := open(endpoint, "")
	defer db.Close()
	rows, err := db.Query(query, vector)
	if err != nil {
		fmt.Printf("FAIL %s: %v\n", query, err)
		os.Exit(1)
	}
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			fmt.Printf("FAIL scan: %v\n", err)
			os.Exit(1)
		}
		fmt.Println(id)
	}
	rows.Close()
	plan := ""
	explain, err := db.Query("EXPLAIN "+query, vector)
	if err != nil {
		fmt.Printf("FAIL EXPLAIN %s: %v\n", query, err)
		os.Exit(1)
	}
	for explain.Next() {
		var kind, text string
		if err := explain.Scan(&kind, &text); err != nil {
			fmt.Printf("FAIL scan: %v\n", err)
			os.Exit(1)
		}
		plan += text
	}
	explain.Close()
	fmt.Printf("index %v\n", strings.Contains(plan, "ANNSubIndex"))
}

func main() {
	if len(os.Args) == 5 && os.Args[1] == "search" {
		search(os.Args[2], os.Args[3], os.Args[4])
		return
	}
	if len(os.Args) != 3 && len(os.Args) != 5 {
		fmt.Println("usage: gosql QUERY_ENDPOINT METADATA_ENDPOINT [QUERY_TOKEN METADATA_TOKEN]")
		os.Exit(2)
	}
	queryToken, metadataToken := "", ""
	if len(os.Args) == 5 {
		queryToken, metadataToken = os.Args[3], os.Args[4]
	}
	query := open(os.Args[1], queryToken)
	meta := open(os.Args[2], metadataToken)
	defer query.Close()
	defer meta.Close()
	ns := fmt.Sprintf("gosql_%d", time.Now().UnixNano())

	check("ping", func() error { return query.Ping() })

	if queryToken != "" {
		check("a connection without the token is refused", func() error {
			anonymous := open(os.Args[1], "")
			defer anonymous.Close()
			var one int64
			err := anonymous.QueryRow("SELECT 1").Scan(&one)
			if err == nil || !strings.Contains(strings.ToLower(err.Error()), "unauthenticated") {
				return fmt.Errorf("got %v", err)
			}
			return nil
		})
		check("the query token cannot write", func() error {
			reader := open(os.Args[2], queryToken)
			defer reader.Close()
			_, err := reader.Exec("CREATE SCHEMA " + ns + "_x")
			if err == nil || !strings.Contains(strings.ToLower(err.Error()), "unauthenticated") {
				return fmt.Errorf("got %v", err)
			}
			return nil
		})
	}

	check("query without arguments", func() error {
		var one int64
		if err := query.QueryRow("SELECT 1").Scan(&one); err != nil {
			return err
		}
		return expect("SELECT 1", one, 1)
	})

	check("DDL through Exec", func() error {
		if err := exec(meta, -1, "CREATE SCHEMA "+ns); err != nil {
			return err
		}
		return exec(meta, -1, "CREATE TABLE "+ns+".t (id BIGINT, name VARCHAR, score DOUBLE, ok BOOLEAN)")
	})

	check("Exec with arguments", func() error {
		if err := exec(meta, 1, "INSERT INTO "+ns+".t VALUES (?, ?, ?, ?)", int64(1), "tea", 1.5, true); err != nil {
			return err
		}
		return exec(meta, 2, "INSERT INTO "+ns+".t VALUES (2, 'cake', 2.5, false), (3, NULL, NULL, NULL)")
	})

	check("prepared statement, executed many times", func() error {
		stmt, err := meta.Prepare("INSERT INTO " + ns + ".t (id, name) VALUES (?, ?)")
		if err != nil {
			return err
		}
		defer stmt.Close()
		for i := int64(10); i < 13; i++ {
			res, err := stmt.Exec(i, fmt.Sprintf("row-%d", i))
			if err != nil {
				return err
			}
			if n, _ := res.RowsAffected(); n != 1 {
				return fmt.Errorf("row %d: %d rows affected", i, n)
			}
		}
		var count int64
		if err := query.QueryRow("SELECT count(*) FROM " + ns + ".t WHERE id >= 10").Scan(&count); err != nil {
			return err
		}
		return expect("rows inserted through the prepared statement", count, 3)
	})

	check("query with arguments (prepared)", func() error {
		var name string
		var score float64
		if err := query.QueryRow("SELECT name, score FROM "+ns+".t WHERE id = ?", int64(1)).Scan(&name, &score); err != nil {
			return err
		}
		if err := expect("name", name, "tea"); err != nil {
			return err
		}
		return expect("score", score, 1.5)
	})

	// database/sql hands the driver every integer as int64 and every float as float64, and
	// arrow-go's driver fills only the type lake declares: lake declares narrow numbers wide and
	// narrows them on binding ("invalid value type int64 for builder *array.Int32Builder" before).
	check("INT, SMALLINT, TINYINT and REAL parameters from Go's native types", func() error {
		if err := exec(meta, -1, "CREATE TABLE "+ns+".narrow (i INT, s SMALLINT, t TINYINT, r REAL, d DATE)"); err != nil {
			return err
		}
		// Every parameter typed by its column: the declared schema is what the driver fills.
		if err := exec(meta, 1, "INSERT INTO "+ns+".narrow (i, s, t, r) VALUES (?, ?, ?, ?)",
			int(7), int16(-3), int8(5), float32(0.25)); err != nil {
			return err
		}
		// arrow-go puts a time.Time only into a Time64 column, not a DATE's: a date goes as text.
		if err := exec(meta, 1, "INSERT INTO "+ns+".narrow (i, d) VALUES (?, CAST(? AS DATE))", 8, "2024-02-29"); err != nil {
			return err
		}
		var i, s, t int64
		var r float64
		if err := query.QueryRow("SELECT i, s, t, r FROM "+ns+".narrow WHERE i = ? AND s = ?", int32(7), -3).
			Scan(&i, &s, &t, &r); err != nil {
			return err
		}
		if err := expect("row", fmt.Sprint(i, s, t, r), "7 -3 5 0.25"); err != nil {
			return err
		}
		var d time.Time
		if err := query.QueryRow("SELECT d FROM "+ns+".narrow WHERE i = ?", 8).Scan(&d); err != nil {
			return err
		}
		return expect("date", d.UTC().Format("2006-01-02"), "2024-02-29")
	})

	check("an integer too large for its INT column is refused, naming the parameter", func() error {
		_, err := meta.Exec("INSERT INTO "+ns+".narrow (i) VALUES (?)", int64(1)<<40)
		if err == nil || !strings.Contains(err.Error(), "parameter $1") || !strings.Contains(err.Error(), "InvalidArgument") {
			return fmt.Errorf("got %v", err)
		}
		return nil
	})

	check("rows of every type", func() error {
		row := query.QueryRow(`SELECT CAST(1 AS TINYINT), CAST(2 AS SMALLINT), CAST(3 AS INT), CAST(4 AS BIGINT),
			CAST(1.25 AS REAL), CAST(2.5 AS DOUBLE), CAST(12.34 AS DECIMAL(10, 2)), 'text', true,
			CAST('2024-02-29' AS DATE), CAST('2024-02-29T12:34:56' AS TIMESTAMP), X'CAFE', CAST(NULL AS BIGINT)`)
		var (
			i8, i16, i32, i64 int64
			f32, f64, dec     float64
			s                 string
			b                 bool
			date, ts          time.Time
			bin               []byte
			null              sql.NullInt64
		)
		if err := row.Scan(&i8, &i16, &i32, &i64, &f32, &f64, &dec, &s, &b, &date, &ts, &bin, &null); err != nil {
			return err
		}
		got := fmt.Sprintln(i8, i16, i32, i64, f32, f64, math.Round(dec*100)/100, s, b,
			date.UTC().Format("2006-01-02"), ts.UTC().Format(time.RFC3339), fmt.Sprintf("%x", bin), null.Valid)
		return expect("values", strings.TrimSpace(got), "1 2 3 4 1.25 2.5 12.34 text true 2024-02-29 2024-02-29T12:34:56Z cafe false")
	})

	check("rows stream in order", func() error {
		rows, err := query.Query("SELECT id, name FROM " + ns + ".t WHERE name IS NOT NULL ORDER BY id")
		if err != nil {
			return err
		}
		defer rows.Close()
		var got []string
		for rows.Next() {
			var id int64
			var name string
			if err := rows.Scan(&id, &name); err != nil {
				return err
			}
			got = append(got, fmt.Sprintf("%d:%s", id, name))
		}
		if err := rows.Err(); err != nil {
			return err
		}
		return expect("rows", strings.Join(got, ","), "1:tea,2:cake,10:row-10,11:row-11,12:row-12")
	})

	check("QueryContext with a deadline", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		started := time.Now()
		var n int64
		err := query.QueryRowContext(ctx,
			"SELECT count(*) FROM generate_series(1, 100000000) a, generate_series(1, 1000) b").Scan(&n)
		if err == nil {
			return fmt.Errorf("a query of 10^11 rows finished within its deadline (%d)", n)
		}
		if elapsed := time.Since(started); elapsed > 10*time.Second {
			return fmt.Errorf("the deadline took %v to stop the call", elapsed)
		}
		if !errors.Is(err, context.DeadlineExceeded) && !strings.Contains(strings.ToLower(err.Error()), "deadline") {
			return fmt.Errorf("not a deadline error: %w", err)
		}
		// The endpoint still answers.
		var one int64
		return query.QueryRow("SELECT 1").Scan(&one)
	})

	check("a bad statement is an error naming it", func() error {
		_, err := query.Query("SELEC 1")
		if err == nil || !strings.Contains(err.Error(), "SELEC") {
			return fmt.Errorf("got %v", err)
		}
		return nil
	})

	check("a write on the query endpoint is refused", func() error {
		_, err := query.Exec("DROP TABLE " + ns + ".t")
		if err == nil || !strings.Contains(err.Error(), "metadata endpoint") {
			return fmt.Errorf("got %v", err)
		}
		return nil
	})

	check("transactions are refused cleanly", func() error {
		tx, err := meta.Begin()
		if err == nil {
			tx.Rollback()
			return errors.New("BeginTx succeeded; lake has no transactions")
		}
		if !strings.Contains(err.Error(), "each statement commits on its own") {
			return fmt.Errorf("the error does not say statements autocommit: %w", err)
		}
		return nil
	})

	check("DROP TABLE through Exec", func() error {
		if err := exec(meta, -1, "DROP TABLE "+ns+".t"); err != nil {
			return err
		}
		_, err := query.Query("SELECT * FROM " + ns + ".t")
		if err == nil {
			return errors.New("the dropped table is still readable")
		}
		return nil
	})

	fmt.Printf("%d passed, %d failed\n", passed, failed)
	if failed > 0 {
		os.Exit(1)
	}
}
