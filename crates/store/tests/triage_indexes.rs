//! The triage queries at scale: 100,000 dead letters, and the plans of the real list and group statements use the
//! indexes of `migrations/0004_triage.sql` rather than scanning and sorting the table.

use std::time::Instant;

use racklift_store::{Cursor, DeadLetterFilter, Store};
use racklift_testdb::TestDb;

const ROWS: i64 = 100_000;

/// 50 servers of five vendors and `ROWS` dead letters, a fifth of them already triaged, one a second apart, with
/// a context shaped like the deployment worker's.
async fn seed(db: &TestDb) {
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "INSERT INTO servers (name, vendor_hint)
           SELECT 'node' || i, (ARRAY['dell', 'hpe', 'lenovo', 'supermicro', 'generic'])[1 + i % 5]
           FROM generate_series(1, 50) i;
         INSERT INTO dead_letters (job_id, kind, payload, priority, resource_key, attempts, max_attempts, reason,
                                   error_class, first_error, last_error, context, job_created_at, dead_at,
                                   triage_status)
           SELECT i, CASE WHEN i % 10 = 0 THEN 'bmc.action' ELSE 'deployment.step' END,
                  jsonb_build_object('deployment_id', i), 0, 'server/node' || (1 + i % 50), 5, 5,
                  'deployment_failed',
                  (ARRAY['transport', 'auth', 'rejected_value', 'busy', 'unsupported', 'deadline'])[1 + i % 6],
                  'first error', 'last error',
                  jsonb_build_object(
                    'operation', CASE WHEN i % 10 = 0 THEN 'bmc_action' ELSE 'deployment' END,
                    'server', 'node' || (1 + i % 50), 'deployment_id', i,
                    'state', (ARRAY['AttachMedia', 'WaitInstall', 'ApplyBIOS', 'SecureBoot'])[1 + i % 4],
                    'last_error', jsonb_build_object('class', 'rejected_value', 'bmc_status', 400,
                      'message_id', CASE WHEN i % 1000 = 7 THEN 'iDRAC.2.8.RAC0218'
                                         ELSE 'Base.1.8.' || (ARRAY['GeneralError', 'PropertyValueNotInList'])[1 + i % 2]
                                    END),
                    'last_facts', jsonb_build_object('power', 'On', 'media', jsonb_build_object('inserted', true),
                                                     'boot_progress', 'OSRunning')),
                  now() - interval '2 days', now() - i * interval '1 second',
                  CASE WHEN i % 5 = 0 THEN 'retried' ELSE 'open' END
           FROM generate_series(1, {ROWS}) i;"
    )))
    .execute(&db.pool)
    .await
    .expect("seed");
    // What autovacuum would have done by the time this many rows exist: statistics, and the visibility map an
    // index-only scan relies on.
    // One statement each: several in one simple query run as one transaction, which VACUUM refuses.
    for statement in ["VACUUM ANALYZE dead_letters", "ANALYZE servers"] {
        sqlx::raw_sql(statement).execute(&db.pool).await.expect(statement);
    }
}

fn assert_uses(plan: &str, index: &str) {
    assert!(plan.contains(index), "expected {index} in the plan:\n{plan}");
    assert!(
        !plan.contains("Seq Scan on dead_letters"),
        "the plan scans the table:\n{plan}"
    );
}

#[tokio::test]
async fn list_and_group_queries_use_the_triage_indexes_at_100k_rows() {
    let db = TestDb::new().await;
    let started = Instant::now();
    seed(&db).await;
    let seed_ms = started.elapsed().as_millis();
    let store = Store::new(db.pool.clone());
    let open = DeadLetterFilter::default();

    let plan = store.explain_dead_letters(&open, None, 50).await.unwrap();
    assert_uses(&plan, "dead_letters_open_page");
    let started = Instant::now();
    let first = store.dead_letters(&open, None, 50).await.unwrap();
    let first_ms = started.elapsed().as_millis();
    assert_eq!(first.items.len(), 50);
    assert!(first.items.iter().all(|d| d.triage_status == "open"));

    let cursor = Cursor::decode(first.next_cursor.as_deref().unwrap()).unwrap();
    let plan = store.explain_dead_letters(&open, Some(cursor), 50).await.unwrap();
    assert_uses(&plan, "dead_letters_open_page");
    eprintln!("second page of the open dead letters:\n{plan}");
    let second = store.dead_letters(&open, Some(cursor), 50).await.unwrap();
    assert!(second.items[0].dead_at <= first.items[49].dead_at);
    assert!(
        !second
            .items
            .iter()
            .any(|d| first.items.iter().any(|f| f.id == d.id))
    );

    // A rare MessageId: the index on it finds its 100 open rows without touching the others.
    let rare = DeadLetterFilter {
        message_id: Some("iDRAC.2.8.RAC0218".into()),
        ..DeadLetterFilter::default()
    };
    let plan = store.explain_dead_letters(&rare, None, 50).await.unwrap();
    assert_uses(&plan, "dead_letters_open_message");
    let page = store.dead_letters(&rare, None, 200).await.unwrap();
    assert_eq!(page.items.len(), 100);
    assert_eq!(page.next_cursor, None);

    let by_server = DeadLetterFilter {
        server: Some("node7".into()),
        ..DeadLetterFilter::default()
    };
    let plan = store.explain_dead_letters(&by_server, None, 50).await.unwrap();
    assert_uses(&plan, "dead_letters_open_");

    let plan = store.explain_dead_letter_groups(&open, 500).await.unwrap();
    assert_uses(&plan, "dead_letters_open_groups");
    eprintln!("group counts of the open dead letters:\n{plan}");
    let started = Instant::now();
    let groups = store.dead_letter_groups(&open, 500).await.unwrap();
    let groups_ms = started.elapsed().as_millis();
    let total: i64 = groups.iter().map(|g| g.count).sum();
    assert_eq!(
        total,
        ROWS * 4 / 5,
        "every open dead letter is in exactly one group"
    );
    assert!(groups.iter().all(|g| g.vendor.is_some()));

    let dell_bios = DeadLetterFilter {
        vendor: Some("dell".into()),
        state: Some("ApplyBIOS".into()),
        min_age_secs: Some(3600),
        ..DeadLetterFilter::default()
    };
    let plan = store.explain_dead_letter_groups(&dell_bios, 500).await.unwrap();
    assert_uses(&plan, "dead_letters_open_");
    let groups = store.dead_letter_groups(&dell_bios, 500).await.unwrap();
    assert!(!groups.is_empty());
    assert!(
        groups
            .iter()
            .all(|g| g.vendor.as_deref() == Some("dell") && g.state.as_deref() == Some("ApplyBIOS"))
    );
    eprintln!(
        "100k dead letters: seeded in {seed_ms} ms, first page {first_ms} ms, group counts {groups_ms} ms"
    );
}
