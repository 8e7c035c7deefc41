//! Loading through the real layers: files written to a jailed working directory, variables set in a jailed
//! environment (figment's `Jail` serialises the tests that touch the process environment).

// `Jail::expect_with` takes closures returning figment's own (large) error type.
#![allow(clippy::result_large_err)]

use std::path::PathBuf;

use figment::Jail;

use super::*;

fn load_file(jail: &mut Jail, toml: &str) -> Result<Settings, ConfigError> {
    // The developer's or CI's own DATABASE_URL and RACKLIFT_* variables must not leak into what is checked.
    jail.clear_env();
    jail.create_file("racklift.toml", toml).expect("write the file");
    Settings::load(&Sources {
        file: Some(PathBuf::from("racklift.toml")),
        ..Sources::default()
    })
}

/// Every leaf of `changed` must differ from the default's, so a key added later without a test value fails here.
fn every_leaf_differs(default: &toml::Value, changed: &toml::Value, path: &str, missing: &mut Vec<String>) {
    match (default, changed) {
        (toml::Value::Table(d), toml::Value::Table(c)) => {
            for (key, dv) in d {
                let sub = if path.is_empty() {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
                match c.get(key) {
                    Some(cv) => every_leaf_differs(dv, cv, &sub, missing),
                    None => missing.push(sub),
                }
            }
        }
        (d, c) if d == c => missing.push(path.to_owned()),
        _ => {}
    }
}

/// Sets every key of the file to a value other than its default.
fn every_key_changed() -> Settings {
    let mut s = Settings::default();
    s.database.url_file = None; // optional keys are checked separately below
    s.database.max_connections = 7;
    s.database.acquire_timeout_secs = 9;
    s.api.listen = "0.0.0.0:8080".parse().unwrap();
    s.api.body_limit_bytes = 4096;
    s.api.bmc_read_timeout_secs = 11;
    s.api.media_flush_interval_ms = 250;
    s.api.media_file_name = "seed.img".into();
    s.api.header_read_timeout_secs = 5;
    s.api.request_timeout_secs = 45;
    s.api.body_timeout_secs = 20;
    s.api.max_connections = 512;
    s.api.max_connections_per_peer = 64;
    s.api.plain_http = true;
    s.api.media_listen = Some("0.0.0.0:7879".parse().unwrap());
    s.api.media_public_address = Some("http://racklift.example.net:7879".into());
    s.worker.concurrency = 12;
    s.worker.batch = 13;
    s.worker.poll_interval_ms = 14;
    s.worker.rescue_interval_ms = 15;
    s.worker.purge_interval_secs = 16;
    s.worker.completer_flushes = 2;
    s.worker.metrics_listen = "0.0.0.0:9999".parse().unwrap();
    s.queue.lease_ttl_ms = 17_000;
    s.queue.retry_backoff_base_ms = 18;
    s.queue.retry_backoff_max_ms = 19_000;
    s.queue.completed_retention_secs = 0;
    s.queue.idempotency_retention_secs = 3600;
    s.paths.data_dir = "/var/lib/racklift".into();
    s.paths.secrets_dir = "/srv/racklift/secrets".into();
    s.paths.secret_env_prefix = "SITE_BMC_".into();
    s.paths.images_dir = "/srv/racklift/images".into();
    let d = &mut s.deploy;
    d.poll_interval_secs = 21;
    d.step_retries = 22;
    d.retry_backoff_secs = 23;
    d.retry_backoff_max_secs = 240;
    d.step_timeout_secs = 25;
    d.bios_applied_timeout_secs = 26;
    d.bios_fallback_attempts = 27;
    d.reboot_timeout_secs = 28;
    d.reboot_observation_window_secs = 29;
    d.registration_timeout_secs = 30;
    d.missed_eject_grace_secs = 24;
    d.media_idle_period_secs = 31;
    d.media_min_bytes_read = 32;
    d.min_install_duration_secs = 33;
    d.install_reboot_fallback_delay_secs = 34;
    d.secure_boot_settle_secs = 35;
    d.install_timeout_secs = 36;
    d.deployment_timeout_secs = 37;
    d.settle_delay_secs = 38;
    d.max_transitions_per_tick = 39;
    d.step_call_timeout_secs = 40;
    d.attach_media_call_timeout_secs = 41;
    d.secure_boot_call_timeout_secs = 42;
    d.bmc_data_refresh_timeout_secs = 43;
    d.media_max_ranges = 44;
    let r = &mut d.rolling;
    r.step_retries = 45;
    r.update_timeout_secs = 46;
    r.evacuate_timeout_secs = 47;
    r.reboot_timeout_secs = 48;
    r.restore_timeout_secs = 49;
    r.post_restore_delay_secs = 50;
    r.poll_interval_secs = 51;
    r.health_gate_timeout_secs = 52;
    r.incus_call_timeout_secs = 53;
    s
}

#[test]
fn every_key_is_read_from_the_file() {
    Jail::expect_with(|jail: &mut Jail| {
        jail.clear_env();
        let changed = every_key_changed();
        let default = toml::Value::try_from(Settings::default()).unwrap();
        let as_toml = toml::Value::try_from(&changed).unwrap();
        let mut same = Vec::new();
        every_leaf_differs(&default, &as_toml, "", &mut same);
        assert!(
            same.is_empty(),
            "keys left at their default in this test: {same:?}"
        );

        let loaded = load_file(&mut *jail, &changed.to_toml().unwrap()).expect("load");
        assert_eq!(loaded, changed);

        // The optional keys.
        jail.create_file("db-url", "postgres://u:p@db:5432/racklift\n")?;
        let loaded = load_file(
            jail,
            "[database]\nurl_file = \"db-url\"\n[tls]\nbmc_ca_file = \"/etc/racklift/bmc-ca.pem\"\n\
             [simulation]\ntime_scale = 0.5\n",
        )
        .expect("load the optional keys");
        assert_eq!(
            loaded.database.url.as_ref().unwrap().expose(),
            "postgres://u:p@db:5432/racklift"
        );
        assert_eq!(loaded.tls.bmc_ca_file, Some("/etc/racklift/bmc-ca.pem".into()));
        assert_eq!(loaded.simulation.time_scale, Some(0.5));
        Ok(())
    });
}

#[test]
fn an_empty_file_changes_nothing() {
    Jail::expect_with(|jail: &mut Jail| {
        jail.clear_env();
        assert_eq!(load_file(&mut *jail, "").expect("load"), Settings::default());
        Ok(())
    });
}

#[test]
fn the_defaults_are_operations_centers() {
    let s = Settings::default();
    assert_eq!(s.deploy, racklift_deploy::Config::default());
    assert_eq!(s.deploy.poll_interval_secs, 10);
    assert_eq!(s.deploy.deployment_timeout_secs, 2 * 3600);
    assert_eq!(s.deploy.media_min_bytes_read, 500 * 1024 * 1024);
}

/// Confined by default: there is no setting that lets a reference or an image name any file.
#[test]
fn secrets_and_images_are_confined_by_default_and_up_keeps_them_in_its_data_directory() {
    Jail::expect_with(|jail: &mut Jail| {
        jail.clear_env();
        let s = load_file(&mut *jail, "").expect("load");
        assert_eq!(s.paths.secrets_dir, PathBuf::from(DEFAULT_SECRETS_DIR));
        assert_eq!(s.paths.secret_env_prefix, DEFAULT_SECRET_ENV_PREFIX);
        assert_eq!(s.paths.images_dir, PathBuf::from(DEFAULT_IMAGES_DIR));

        let up = |flags: &[(&'static str, &str)]| {
            let mut sources = Sources {
                paths_in_data_dir: true,
                ..Sources::default()
            };
            for (key, value) in flags {
                sources.flag(key, Some(*value));
            }
            Settings::load(&sources).expect("load as up")
        };
        /// Flags given as (dotted key, value).
        type Flags<'a> = &'a [(&'static str, &'a str)];
        // (what is set, secrets_dir, images_dir)
        let cases: [(Flags, &str, &str); 3] = [
            (&[], ".racklift/secrets", ".racklift/images"),
            (
                &[("paths.data_dir", "/tmp/rl")],
                "/tmp/rl/secrets",
                "/tmp/rl/images",
            ),
            (
                &[
                    ("paths.data_dir", "/tmp/rl"),
                    ("paths.secrets_dir", "/etc/site-secrets"),
                ],
                "/etc/site-secrets",
                "/tmp/rl/images",
            ),
        ];
        for (flags, secrets, images) in cases {
            let s = up(flags);
            assert_eq!(
                (s.paths.secrets_dir.as_path(), s.paths.images_dir.as_path()),
                (std::path::Path::new(secrets), std::path::Path::new(images)),
                "{flags:?}"
            );
        }
        // The file names one: it wins over up's own place, as does the environment.
        jail.create_file("racklift.toml", "[paths]\nimages_dir = \"/srv/images\"\n")?;
        jail.set_env("RACKLIFT_PATHS__SECRETS_DIR", "/run/secrets/racklift");
        let s = Settings::load(&Sources {
            file: Some("racklift.toml".into()),
            paths_in_data_dir: true,
            ..Sources::default()
        })
        .expect("load as up with a file");
        assert_eq!(s.paths.images_dir, PathBuf::from("/srv/images"));
        assert_eq!(s.paths.secrets_dir, PathBuf::from("/run/secrets/racklift"));
        Ok(())
    });
}

#[test]
fn an_unknown_key_is_an_error_naming_it_and_its_file() {
    Jail::expect_with(|jail: &mut Jail| {
        jail.clear_env();
        let err = load_file(&mut *jail, "[worker]\nconcurency = 5\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("concurency"), "{err}");
        assert!(err.contains("racklift.toml"), "{err}");
        let err = load_file(&mut *jail, "[workers]\nconcurrency = 5\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("workers"), "{err}");
        Ok(())
    });
}

#[test]
fn a_value_without_its_unit_or_of_the_wrong_type_is_an_error() {
    Jail::expect_with(|jail: &mut Jail| {
        jail.clear_env();
        // The key carries the unit; "30s" is not a number of milliseconds.
        let err = load_file(&mut *jail, "[queue]\nlease_ttl_ms = \"30s\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("lease_ttl_ms"), "{err}");
        // A unit-less key does not exist.
        let err = load_file(&mut *jail, "[queue]\nlease_ttl = 30000\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("lease_ttl"), "{err}");
        let err = load_file(&mut *jail, "[api]\nlisten = \"localhost\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("listen"), "{err}");
        let err = load_file(&mut *jail, "[worker]\nconcurrency = -1\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("concurrency"), "{err}");
        Ok(())
    });
}

#[test]
fn values_that_cannot_work_are_rejected_with_the_full_key() {
    Jail::expect_with(|jail: &mut Jail| {
        jail.clear_env();
        let cases = [
            ("[worker]\nconcurrency = 0\n", "worker.concurrency"),
            ("[queue]\nlease_ttl_ms = 100\n", "queue.lease_ttl_ms"),
            (
                "[queue]\nretry_backoff_base_ms = 10\nretry_backoff_max_ms = 5\n",
                "queue.retry_backoff_max_ms",
            ),
            ("[deploy]\npoll_interval_secs = 0\n", "deploy.poll_interval_secs"),
            ("[simulation]\ntime_scale = 2.0\n", "simulation.time_scale"),
            ("[api]\nmedia_file_name = \"a/b\"\n", "api.media_file_name"),
            ("[api]\nrequest_timeout_secs = 30\n", "api.request_timeout_secs"),
            ("[api]\nmax_connections = 0\n", "api.max_connections"),
            (
                "[api]\nmax_connections_per_peer = 0\n",
                "api.max_connections_per_peer",
            ),
            (
                "[queue]\nidempotency_retention_secs = 0\n",
                "queue.idempotency_retention_secs",
            ),
            ("[paths]\nsecret_env_prefix = \"\"\n", "paths.secret_env_prefix"),
            ("[paths]\nsecrets_dir = \"/\"\n", "paths.secrets_dir"),
            ("[paths]\nsecrets_dir = \"\"\n", "paths.secrets_dir"),
            ("[paths]\nimages_dir = \"/./\"\n", "paths.images_dir"),
            (
                "[paths]\nsecret_env_prefix = \"BMC-\"\n",
                "paths.secret_env_prefix",
            ),
            (
                "[paths]\nsecret_env_prefix = \"A__\"\n",
                "paths.secret_env_prefix",
            ),
        ];
        for (toml, key) in cases {
            let err = load_file(&mut *jail, toml).unwrap_err();
            assert!(
                matches!(&err, ConfigError::Invalid { key: k, .. } if k == key),
                "{toml}: {err}"
            );
        }
        Ok(())
    });
}

#[test]
fn a_missing_file_is_an_error() {
    Jail::expect_with(|_| {
        let err = Settings::load(&Sources {
            file: Some("nowhere.toml".into()),
            ..Sources::default()
        })
        .unwrap_err();
        assert!(matches!(err, ConfigError::MissingFile { .. }), "{err}");
        Ok(())
    });
}

#[test]
fn the_environment_overrides_the_file_and_flags_override_both() {
    Jail::expect_with(|jail: &mut Jail| {
        jail.clear_env();
        jail.create_file(
            "racklift.toml",
            "[worker]\nconcurrency = 5\nbatch = 6\n[api]\nlisten = \"127.0.0.1:1\"\n",
        )?;
        jail.set_env(CONFIG_ENV, "racklift.toml");
        jail.set_env("RACKLIFT_WORKER__CONCURRENCY", "50");
        jail.set_env("RACKLIFT_DEPLOY__STEP_RETRIES", "9");
        jail.set_env("RACKLIFT_API_LISTEN", "127.0.0.1:2");
        // Variables of the client commands share the prefix and are not configuration keys.
        jail.set_env("RACKLIFT_TOKEN", "secret");
        jail.set_env("RACKLIFT_API", "http://elsewhere");
        let s = Settings::load(&Sources::default()).expect("load");
        assert_eq!(s.worker.concurrency, 50);
        assert_eq!(s.worker.batch, 6);
        assert_eq!(s.deploy.step_retries, 9);
        assert_eq!(s.api.listen, "127.0.0.1:2".parse().unwrap());

        let mut sources = Sources::default();
        sources
            .flag("worker.concurrency", Some(500usize))
            .flag("worker.batch", None::<usize>);
        let s = Settings::load(&sources).expect("load with flags");
        assert_eq!(s.worker.concurrency, 500);
        assert_eq!(s.worker.batch, 6, "an absent flag leaves the value alone");

        jail.set_env("RACKLIFT_WORKER__CONCURENCY", "1");
        let err = Settings::load(&Sources::default()).unwrap_err().to_string();
        assert!(err.contains("concurency"), "{err}");
        Ok(())
    });
}

#[test]
fn a_time_scale_shrinks_the_deploy_defaults_under_explicit_values() {
    Jail::expect_with(|jail: &mut Jail| {
        jail.clear_env();
        let s = load_file(
            &mut *jail,
            "[simulation]\ntime_scale = 0.01\n[deploy]\nstep_retries = 5\n",
        )
        .expect("load");
        let scaled = racklift_deploy::Config::for_simulation(0.01);
        assert_eq!(s.deploy.poll_interval_secs, scaled.poll_interval_secs);
        assert_eq!(s.deploy.install_timeout_secs, scaled.install_timeout_secs);
        assert_eq!(s.deploy.step_retries, 5);

        let s = Settings::load(&Sources {
            default_time_scale: Some(0.01),
            ..Sources::default()
        })
        .expect("load with a default scale");
        assert_eq!(s.simulation.time_scale, Some(0.01));
        assert_eq!(s.deploy, scaled);
        Ok(())
    });
}

#[test]
fn the_database_url_comes_from_the_environment_first_and_is_shown_redacted() {
    Jail::expect_with(|jail: &mut Jail| {
        jail.clear_env();
        jail.create_file("db-url", "postgres://u:from-file@db/racklift")?;
        jail.create_file("racklift.toml", "[database]\nurl_file = \"db-url\"\n")?;
        jail.set_env("DATABASE_URL", "postgres://u:from-env@db/racklift");
        let s = Settings::load(&Sources {
            file: Some("racklift.toml".into()),
            ..Sources::default()
        })
        .expect("load");
        assert!(s.database.url.as_ref().unwrap().expose().contains("from-env"));
        let shown = s.to_toml().unwrap();
        assert!(
            !shown.contains("from-env") && shown.contains("redacted"),
            "{shown}"
        );

        // The URL itself is not a key.
        let err = load_file(&mut *jail, "[database]\nurl = \"postgres://u:p@db/x\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("url"), "{err}");
        jail.set_env("DATABASE_URL", "mysql://u:p@db/x");
        let err = Settings::load(&Sources::default()).unwrap_err().to_string();
        assert!(err.contains("DATABASE_URL") && !err.contains("u:p"), "{err}");
        Ok(())
    });
}

fn leaves(value: &toml::Value, path: &str, out: &mut Vec<String>) {
    match value {
        toml::Value::Table(t) => {
            for (key, v) in t {
                let sub = if path.is_empty() {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
                leaves(v, &sub, out);
            }
        }
        _ => out.push(path.to_owned()),
    }
}

/// The reference in README.md names every key there is, and no key that is not.
#[test]
fn the_reference_documents_every_key() {
    let readme = include_str!("../README.md");
    let mut all = every_key_changed();
    all.database.url_file = Some("f".into());
    all.tls.bmc_ca_file = Some("c".into());
    all.api.tls_certificate = Some("a.crt".into());
    all.api.tls_key = Some("a.key".into());
    all.simulation.time_scale = Some(0.5);
    let mut keys = Vec::new();
    leaves(&toml::Value::try_from(&all).unwrap(), "", &mut keys);
    let documented: Vec<&str> = readme
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split('`').next())
        .filter(|k| k.contains('.'))
        .collect();
    for key in &keys {
        assert!(
            documented.contains(&key.as_str()),
            "{key} is not in crates/config/README.md"
        );
    }
    for key in &documented {
        assert!(
            keys.iter().any(|k| k == key),
            "crates/config/README.md documents {key}, which does not exist"
        );
    }
}

/// The file the systemd units point at loads as it is shipped.
#[test]
fn the_shipped_example_loads() {
    Jail::expect_with(|jail: &mut Jail| {
        let s =
            load_file(jail, include_str!("../../../ops/systemd/racklift.toml")).expect("load the example");
        assert_eq!(s.api.listen, "0.0.0.0:7878".parse().unwrap());
        assert_eq!(s.paths.secrets_dir, std::path::Path::new("/etc/racklift/secrets"));
        assert_eq!(
            s.paths.images_dir,
            std::path::Path::new("/var/lib/racklift/images")
        );
        Ok(())
    });
}

#[test]
fn tls_and_media_listener_keys_that_cannot_work_are_refused_naming_the_key() {
    type Change = fn(&mut Settings);
    let cases: [(Change, &str); 4] = [
        (
            |s| s.api.tls_certificate = Some("/etc/racklift/api.crt".into()),
            "api.tls_key",
        ),
        (
            |s| s.api.tls_key = Some("/etc/racklift/api.key".into()),
            "api.tls_certificate",
        ),
        (
            |s| {
                s.api.tls_certificate = Some("/etc/racklift/api.crt".into());
                s.api.tls_key = Some("/etc/racklift/api.key".into());
                s.api.plain_http = true;
            },
            "api.plain_http",
        ),
        (
            |s| s.api.media_listen = Some("0.0.0.0:7879".parse().unwrap()),
            "api.media_public_address",
        ),
    ];
    for (change, key) in cases {
        let mut s = Settings::default();
        change(&mut s);
        let error = s.validate().expect_err(key).to_string();
        assert!(error.starts_with(key), "{error}");
    }
}
