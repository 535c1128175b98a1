//! Integration tests of nightshift-tools against real files, processes and a loopback HTTP
//! server. One binary (faster to build); the environment-isolation test lives in its own
//! binary because it sets a variable in the test process.

mod background;
mod command_tools;
mod common;
mod confine;
mod cut_points;
mod files;
mod http;
mod input_schema;
mod registry;
mod run_command;
mod search;
mod secret_hosts;
mod todo;
