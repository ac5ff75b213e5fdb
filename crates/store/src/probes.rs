//! Cost probes of the SQLite write path (issue 24's "where the writer's time goes"). Ignored:
//! they measure, they assert nothing. Rerun with
//! `cargo test --release -p trellis-store --lib probes -- --ignored --nocapture --test-threads 1`
//! (figures in docs/benchmarks.md, "Against OpenBao with the read cache").

use std::time::Instant;

use crate::Store;

async fn exec(store: &Store, sql: &str) {
    sqlx::query(sql).execute(&store.pool).await.unwrap_or_else(|err| panic!("{sql}: {err}"));
}

fn median(samples: &[f64]) -> f64 {
    let mut samples = samples.to_vec();
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

/// One statement's round trip to SQLite's connection thread, the statement itself costing
/// nothing (`SELECT 1`, inside a write transaction as the writer's statements are).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a cost probe: run it by name"]
async fn statement_round_trip() {
    let (_dir, store) = crate::testing::store().await;
    let mut tx = store.begin_tx().await.expect("tx");
    let mut samples = Vec::new();
    for _ in 0..5 {
        let started = Instant::now();
        for _ in 0..2_000 {
            sqlx::query("SELECT 1").execute(tx.conn().await.expect("conn")).await.expect("select");
        }
        samples.push(started.elapsed().as_secs_f64() / 2_000.0 * 1e6);
    }
    eprintln!("PROBE statement round trip: median {:.1} µs of {samples:.1?}", median(&samples));
}

/// A certificate row as the group-commit writer writes it (32 jobs a batch, each in its own
/// savepoint), with the search index's and tallies' triggers, without them, and without the
/// savepoints (FTS5 writes a segment at every savepoint's end).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a cost probe: run it by name"]
async fn certificate_insert_in_a_batch() {
    let cases: [(&str, &[&str], bool); 4] = [
        ("every trigger, a savepoint a job", &[], true),
        ("no search index, a savepoint a job", &["certificates_search_insert"], true),
        (
            "no search index nor tallies, a savepoint a job",
            &["certificates_search_insert", "certificates_tally_insert"],
            true,
        ),
        ("every trigger, no savepoints", &[], false),
    ];
    for (label, dropped, savepoints) in cases {
        let mut samples = Vec::new();
        for _ in 0..3 {
            samples.push(insert_batches(dropped, savepoints).await);
        }
        eprintln!("PROBE certificate insert, {label}: median {:.1} µs of {samples:.1?}", median(&samples));
    }
}

/// µs per certificate over 60 batches of 32.
async fn insert_batches(dropped_triggers: &[&str], savepoints: bool) -> f64 {
    let (_dir, store) = crate::testing::store().await;
    exec(&store, "INSERT INTO workspaces (id, name, created_at, updated_at) VALUES ('ws', 'ws', 0, 0)").await;
    for trigger in dropped_triggers {
        exec(&store, &format!("DROP TRIGGER {trigger}")).await;
    }
    let started = Instant::now();
    let mut id = 0_i64;
    for _ in 0..60 {
        let mut tx = store.begin_tx().await.expect("tx");
        for _ in 0..32 {
            id += 1;
            if savepoints {
                sqlx::query("SAVEPOINT job").execute(tx.conn().await.expect("conn")).await.expect("savepoint");
            }
            sqlx::query(
                "INSERT INTO certificates (id, workspace_id, common_name, issuer, subject, serial_number, not_before, \
                 expires_at, signature_algorithm, key_algorithm, fingerprint_sha256, usage_category, issuance_source, \
                 certificate_pem, created_at, updated_at) VALUES ($1, 'ws', $2, 'CN=Bench Root,O=Trellis', $3, $4, 0, \
                 $5, 'SHA256-ECDSA', 'EC', $6, 'TLS', 'internal', $7, 0, 0) RETURNING id",
            )
            .bind(id)
            .bind(format!("host-{id}.bench.example.com"))
            .bind(format!("CN=host-{id}.bench.example.com"))
            .bind(format!("{id:032x}"))
            .bind(1_800_000_000_000 + id * 1_000)
            .bind(format!("{id:064x}"))
            .bind("x".repeat(700))
            .fetch_one(tx.conn().await.expect("conn"))
            .await
            .expect("insert");
            tx.note_certificate_inserted();
            if savepoints {
                sqlx::query("RELEASE job").execute(tx.conn().await.expect("conn")).await.expect("release");
            }
        }
        tx.commit_tx().await.expect("commit");
    }
    started.elapsed().as_secs_f64() / f64::from(60 * 32) * 1e6
}
