//! lake-runtime: the shared Flight SQL / Lance runtime of lake's query and metadata roles.

pub mod aws;
pub mod catalog;
pub mod conform;
pub mod context;
pub mod engine;
pub mod flight;
pub mod maintain;
pub mod manifest;
mod nested;
pub mod provision;
pub mod selftest;
pub mod sql_client;
pub mod stage;
pub mod stage_cli;
pub mod store;
pub mod write;
