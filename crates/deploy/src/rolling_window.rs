//! When a rolling run may start its next member: not before a given time, and only inside a daily maintenance
//! window. What is in flight when a window closes is finished (a member left evacuated outside the window would
//! be worse); the next member waits for the window to open again.

use chrono::{NaiveTime, TimeDelta};
use serde::{Deserialize, Serialize};

use crate::Time;

/// A daily window in UTC: from `start_utc` (`HH:MM`) for `duration_secs`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DailyWindow {
    #[schema(pattern = r"^([01][0-9]|2[0-3]):[0-5][0-9]$", example = "22:00")]
    pub start_utc: String,
    /// At most a day; a day means always open.
    #[schema(minimum = 60, maximum = 86400, example = 14400)]
    pub duration_secs: u64,
}

/// When the members of a run may be started.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default, deny_unknown_fields)]
pub struct Schedule {
    /// No member is started before this time.
    #[schema(value_type = Option<String>, format = DateTime, example = "2026-12-24T22:00:00Z")]
    pub not_before: Option<Time>,
    /// Members are started only inside this daily window.
    pub window: Option<DailyWindow>,
}

/// A schedule field that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleError {
    #[error("window.start_utc must be HH:MM (00:00 to 23:59)")]
    Start,
    #[error("window.duration_secs must be 60 to 86400")]
    Duration,
}

impl DailyWindow {
    fn start(&self) -> Result<NaiveTime, ScheduleError> {
        NaiveTime::parse_from_str(&self.start_utc, "%H:%M").map_err(|_| ScheduleError::Start)
    }

    /// The window's opening at or before `now` on the same or the previous day, and whether `now` is inside it.
    fn open_at(&self, now: Time) -> Result<(Time, bool), ScheduleError> {
        let start = self.start()?;
        let today = now.date_naive().and_time(start).and_utc();
        let opened = if today <= now {
            today
        } else {
            today - TimeDelta::days(1)
        };
        let inside = now < opened + duration(self.duration_secs);
        Ok((opened, inside))
    }
}

fn duration(secs: u64) -> TimeDelta {
    TimeDelta::seconds(secs.min(86_400) as i64)
}

impl Schedule {
    /// Rejects a window that cannot be read, naming the field.
    pub fn validate(&self) -> Result<(), ScheduleError> {
        if let Some(w) = &self.window {
            w.start()?;
            if !(60..=86_400).contains(&w.duration_secs) {
                return Err(ScheduleError::Duration);
            }
        }
        Ok(())
    }

    /// `None` when a member may be started at `now`, else the next time one may.
    pub fn next_start(&self, now: Time) -> Option<Time> {
        let now_or_later = match self.not_before {
            Some(t) if t > now => t,
            _ => now,
        };
        let at = match &self.window {
            None => now_or_later,
            Some(w) => match w.open_at(now_or_later) {
                Ok((_, true)) => now_or_later,
                Ok((opened, false)) => opened + TimeDelta::days(1),
                // Validated at launch; an unreadable window stored earlier does not hold the run forever.
                Err(_) => now_or_later,
            },
        };
        (at > now).then_some(at)
    }
}

#[cfg(test)]
mod tests {
    use chrono::{TimeZone, Utc};

    use super::*;

    fn at(h: u32, m: u32) -> Time {
        Utc.with_ymd_and_hms(2026, 12, 2, h, m, 0).unwrap()
    }

    #[test]
    fn the_next_start_follows_not_before_and_the_daily_window() {
        let night = Some(DailyWindow {
            start_utc: "22:00".into(),
            duration_secs: 4 * 3600,
        });
        let tomorrow = |h, m| at(h, m) + TimeDelta::days(1);
        for (name, schedule, now, want) in [
            ("no schedule", Schedule::default(), at(12, 0), None),
            (
                "before not_before",
                Schedule {
                    not_before: Some(at(13, 0)),
                    window: None,
                },
                at(12, 0),
                Some(at(13, 0)),
            ),
            (
                "after not_before",
                Schedule {
                    not_before: Some(at(11, 0)),
                    window: None,
                },
                at(12, 0),
                None,
            ),
            (
                "inside the window",
                Schedule {
                    not_before: None,
                    window: night.clone(),
                },
                at(23, 0),
                None,
            ),
            (
                "inside the window past midnight",
                Schedule {
                    not_before: None,
                    window: night.clone(),
                },
                at(1, 59),
                None,
            ),
            (
                "the window closed at 02:00",
                Schedule {
                    not_before: None,
                    window: night.clone(),
                },
                at(2, 0),
                Some(at(22, 0)),
            ),
            (
                "before the window",
                Schedule {
                    not_before: None,
                    window: night.clone(),
                },
                at(12, 0),
                Some(at(22, 0)),
            ),
            (
                "not_before inside a later window",
                Schedule {
                    not_before: Some(tomorrow(23, 30)),
                    window: night.clone(),
                },
                at(23, 0),
                Some(tomorrow(23, 30)),
            ),
            (
                "not_before outside the window waits for its opening",
                Schedule {
                    not_before: Some(tomorrow(3, 0)),
                    window: night.clone(),
                },
                at(23, 0),
                Some(tomorrow(22, 0)),
            ),
        ] {
            assert_eq!(schedule.next_start(now), want, "{name}");
        }
    }

    #[test]
    fn a_run_starts_no_member_outside_its_schedule_but_finishes_the_one_in_flight() {
        use std::collections::BTreeMap;

        use crate::rolling::{RollingConfig, RollingStep};
        use crate::rolling_run::{
            MemberFacts, MemberStatus, RollingRun, RunDecision, RunKind, RunSettings, decide_run,
        };

        let online = MemberFacts {
            member_name: Some("m".into()),
            reachable: true,
            status: Some(MemberStatus::Online),
            ..MemberFacts::default()
        };
        let members = vec![
            ("s1".to_owned(), online.clone()),
            ("s2".to_owned(), online.clone()),
        ];
        let mut run = RollingRun::launch(RunKind::Reboot, &members).unwrap();
        run.schedule.not_before = Some(at(13, 0));
        let facts: BTreeMap<String, MemberFacts> = members.into_iter().collect();
        let cfg = RollingConfig::default();
        let settings = RunSettings {
            post_restore_delay_secs: Some(0),
            health_gate_timeout_secs: 600,
        };
        // Before not_before: nothing is triggered, the wait ends no later than the start.
        let (_, d) = decide_run(&run, &facts, at(12, 0), &cfg, &settings);
        let RunDecision::Wait { until } = d else {
            panic!("{d:?}")
        };
        assert!(until <= at(13, 0), "{until}");
        // From not_before on: the first member is evacuated.
        let (next, d) = decide_run(&run, &facts, at(13, 0), &cfg, &settings);
        assert_eq!(
            d,
            RunDecision::Trigger {
                server: "s1".into(),
                step: RollingStep::Evacuate
            }
        );
        // A member in flight is finished even once the window has closed: the window only gates evacuations.
        let mut in_flight = next.clone();
        in_flight.schedule.window = Some(DailyWindow {
            start_utc: "13:00".into(),
            duration_secs: 60,
        });
        let mut evacuated = facts.clone();
        evacuated.get_mut("s1").unwrap().status = Some(MemberStatus::Evacuated);
        let (_, d) = decide_run(&in_flight, &evacuated, at(14, 0), &cfg, &settings);
        assert_eq!(
            d,
            RunDecision::Trigger {
                server: "s1".into(),
                step: RollingStep::Reboot
            }
        );
    }

    #[test]
    fn unreadable_windows_are_refused_naming_the_field() {
        for (start, secs, want) in [
            ("22:00", 3600, Ok(())),
            ("24:00", 3600, Err(ScheduleError::Start)),
            ("7pm", 3600, Err(ScheduleError::Start)),
            ("22:00", 59, Err(ScheduleError::Duration)),
            ("22:00", 86_401, Err(ScheduleError::Duration)),
        ] {
            let s = Schedule {
                not_before: None,
                window: Some(DailyWindow {
                    start_utc: start.into(),
                    duration_secs: secs,
                }),
            };
            assert_eq!(s.validate(), want, "{start} {secs}");
        }
    }
}
