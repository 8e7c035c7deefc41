//! `racklift deploy …`: commands about the deployment state machine.

use clap::Subcommand;
use racklift_deploy::{Config, mermaid, rolling::RollingConfig};

#[derive(Subcommand)]
pub enum DeployCommand {
    /// Print the deployment state table (with the default budgets) or its diagram.
    States {
        /// Print the mermaid diagram, as committed in crates/deploy/STATES.md.
        #[arg(long)]
        mermaid: bool,
        /// The rolling restart / reboot table instead of the deployment's.
        #[arg(long)]
        rolling: bool,
    },
}

pub fn run(cmd: DeployCommand) -> anyhow::Result<()> {
    match cmd {
        DeployCommand::States {
            mermaid: true,
            rolling: false,
        } => print!("{}", mermaid::deployment()),
        DeployCommand::States {
            mermaid: true,
            rolling: true,
        } => print!("{}", mermaid::rolling()),
        DeployCommand::States {
            mermaid: false,
            rolling: false,
        } => {
            print!("{}", mermaid::deployment_table(&Config::default()))
        }
        DeployCommand::States {
            mermaid: false,
            rolling: true,
        } => {
            print!("{}", mermaid::rolling_table(&RollingConfig::default()))
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::DeployCommand;

    #[derive(Parser)]
    struct Wrap {
        #[command(subcommand)]
        cmd: DeployCommand,
    }

    #[test]
    fn parses_states_flags() {
        let w = Wrap::try_parse_from(["deploy", "states", "--mermaid", "--rolling"]).unwrap();
        assert!(matches!(
            w.cmd,
            DeployCommand::States {
                mermaid: true,
                rolling: true
            }
        ));
        let w = Wrap::try_parse_from(["deploy", "states"]).unwrap();
        assert!(matches!(
            w.cmd,
            DeployCommand::States {
                mermaid: false,
                rolling: false
            }
        ));
        assert!(Wrap::try_parse_from(["deploy", "states", "--svg"]).is_err());
    }
}
