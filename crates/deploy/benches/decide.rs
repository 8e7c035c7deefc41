//! Decisions per second over a mix of states and facts a worker meets in practice.

use std::collections::BTreeMap;

use chrono::{TimeDelta, TimeZone, Utc};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use racklift_deploy::facts::{
    AttrValue, BiosFacts, BootProgress, Fingerprint, KeyDb, MediaProgress, MediaSlot, PowerState,
};
use racklift_deploy::reboot::RebootWatch;
use racklift_deploy::record::{BiosPlan, SecureBootPlan};
use racklift_deploy::{Config, Deployment, Facts, Plan, State, Time, decide};

const IMAGE: &str = "https://racklift.example/media/d1.iso";

fn t(s: i64) -> Time {
    Utc.timestamp_opt(1_800_000_000, 0).unwrap() + TimeDelta::seconds(s)
}

fn fp(s: &str) -> Fingerprint {
    Fingerprint(s.to_owned())
}

fn plan() -> Plan {
    Plan {
        image_url: IMAGE.to_owned(),
        image_size_bytes: Some(3 << 30),
        force: true,
        skip_secure_boot_certificates: false,
        reinstall: false,
        bios_profiles: vec!["bench".to_owned()],
        bios: BiosPlan {
            attributes: (0..8)
                .map(|i| (format!("Attr{i}"), AttrValue::Text("Enabled".into())))
                .collect(),
            deferred_attributes: [("SriovVfCount".to_owned(), AttrValue::Int(8))].into(),
        },
        secure_boot: SecureBootPlan {
            incusos: KeyDb::ALL
                .iter()
                .take(3)
                .map(|db| (*db, [fp("incusos")].into()))
                .collect(),
            allow: [(KeyDb::Db, [fp("msca"), fp("mswin")].into())].into(),
        },
        ..Plan::default()
    }
}

fn facts() -> Facts {
    let p = plan();
    let current: BTreeMap<_, _> = p
        .bios
        .attributes
        .clone()
        .into_iter()
        .chain(p.bios.deferred_attributes)
        .collect();
    Facts {
        power: Some(PowerState::On),
        last_reset_time: Some(t(10)),
        boot_progress: Some(BootProgress::OSRunning),
        boot_progress_at: Some(t(40)),
        media: Some(MediaSlot {
            inserted: true,
            image: Some(IMAGE.into()),
            transfer_method: None,
        }),
        bios: Some(BiosFacts {
            current,
            pending: BTreeMap::new(),
        }),
        bios_absent: false,
        bios_task: None,
        key_dbs: KeyDb::ALL
            .iter()
            .map(|db| (*db, vec![fp("incusos"), fp("msca")]))
            .collect(),
        registered: false,
        registration_refused: None,
        media_progress: Some(MediaProgress {
            bytes_read: 300 << 20,
            last_read_at: Some(t(590)),
        }),
        cancel: None,
    }
}

/// One deployment in each of the states a fleet spends most of its decisions in.
fn workload() -> Vec<(Deployment, Facts)> {
    let states = [
        State::CheckBIOS,
        State::WaitPowerOffBIOS,
        State::WaitBIOSApplied,
        State::VerifyBIOS,
        State::SecureBoot,
        State::WaitMediaAttached,
        State::WaitInstall,
        State::WaitInstall,
        State::WaitInstall,
        State::WaitReboot,
        State::WaitRegistration,
        State::AttachMedia,
    ];
    states
        .iter()
        .map(|s| {
            let mut d = Deployment::new(plan(), t(0));
            d.machine.state = *s;
            d.machine.state_entered_at = t(100);
            d.machine.install_watch = Some(RebootWatch::anchor(&facts(), t(160)));
            (d, facts())
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let cfg = Config::default();
    let work = workload();
    let now = t(600);
    let mut group = c.benchmark_group("decide");
    group.throughput(Throughput::Elements(work.len() as u64));
    group.bench_function("mixed_states", |b| {
        b.iter(|| {
            for (d, f) in &work {
                std::hint::black_box(decide(std::hint::black_box(d), f, now, &cfg));
            }
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
