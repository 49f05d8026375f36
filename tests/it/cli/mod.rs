//! The command line, the shipped files (units, man page, example config, alert rules) and the
//! README checked against the binary and the sources.

mod alert_rules;
mod bad_input;
mod check_config_refuses_a_read_only_data_dir;
mod config_example;
mod contract;
mod install_block;
mod layers;
mod lock_refusal_names_the_holder;
mod man_page;
mod readme_command_list;
mod readme_contents;
mod service;
mod unit_syscalls;
mod units;
