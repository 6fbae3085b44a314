//! The custom actions (DoAction types beyond Flight SQL's own), each listed once: its name, what
//! ListActions says of it, and what it does.

use arrow_flight::ActionType;
use lake_common::stage::{DESCRIBE_STAGE_ACTION, METADATA_ENDPOINT_ACTION};
use prost::Message;
use tonic::Status;

use super::handle::Handle;
use super::options::{Reply, SessionOptions};
use super::plans::Cancel;
use super::service::{LakeFlightSql, Role};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum CustomAction {
    /// Flight core's session options (`options.rs`): ADBC's current schema.
    SetSessionOptions,
    GetSessionOptions,
    /// Flight core's session close, which ADBC sends.
    CloseSession,
    DescribeStage,
    MetadataEndpoint,
    CancelFlightInfo,
}

impl CustomAction {
    const ALL: [Self; 6] = [
        Self::SetSessionOptions,
        Self::GetSessionOptions,
        Self::CloseSession,
        Self::DescribeStage,
        Self::MetadataEndpoint,
        Self::CancelFlightInfo,
    ];

    fn name(self) -> &'static str {
        match self {
            Self::SetSessionOptions => "SetSessionOptions",
            Self::GetSessionOptions => "GetSessionOptions",
            Self::CloseSession => "CloseSession",
            Self::DescribeStage => DESCRIBE_STAGE_ACTION,
            Self::MetadataEndpoint => METADATA_ENDPOINT_ACTION,
            Self::CancelFlightInfo => "CancelFlightInfo",
        }
    }

    fn description(self) -> &'static str {
        match self {
            Self::SetSessionOptions => {
                "Set the session's schema (option \"schema\"; \"catalog\" is always lake) and lake.* settings, carried in cookies"
            }
            Self::GetSessionOptions => "The session's catalog, schema and lake.* settings",
            Self::CloseSession => "Close the session: its options are forgotten",
            Self::DescribeStage => {
                "The managed stage's location as a versioned JSON descriptor (never a credential)"
            }
            Self::MetadataEndpoint => {
                "The metadata endpoint that takes writes (empty if none is configured)"
            }
            Self::CancelFlightInfo => {
                "Cancel the query of a FlightInfo: its DoGet ends with CANCELLED"
            }
        }
    }

    pub(super) fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|a| a.name() == name)
    }

    /// What ListActions reports beyond Flight SQL's own actions.
    pub(super) fn listed() -> Vec<ActionType> {
        Self::ALL
            .into_iter()
            .map(|a| ActionType {
                r#type: a.name().into(),
                description: a.description().into(),
            })
            .collect()
    }
}

impl LakeFlightSql {
    /// Performs `action` with the request's `body` for a call with `metadata` (its session
    /// cookies): its one result's body, and the cookies that carry the session's options on.
    pub(super) fn perform(
        &self,
        action: CustomAction,
        body: &[u8],
        metadata: &tonic::metadata::MetadataMap,
    ) -> Result<Reply, Status> {
        let plain = |body: Vec<u8>| Reply {
            body,
            cookies: Vec::new(),
        };
        Ok(match action {
            CustomAction::SetSessionOptions => SessionOptions::from_metadata(metadata).set(body)?,
            CustomAction::GetSessionOptions => SessionOptions::from_metadata(metadata).get(),
            CustomAction::CloseSession => SessionOptions::close(metadata),
            CustomAction::DescribeStage => plain(match &self.role {
                Role::Query { context, .. } => context.stage().encode(),
                Role::Metadata(context) => context.stage().descriptor().encode(),
            }),
            CustomAction::MetadataEndpoint => plain(match &self.role {
                Role::Query {
                    metadata_endpoint, ..
                } => metadata_endpoint.clone().unwrap_or_default().into_bytes(),
                Role::Metadata(_) => Vec::new(),
            }),
            CustomAction::CancelFlightInfo => plain(self.cancel_flight_info(body)?.encode_to_vec()),
        })
    }

    /// CancelFlightInfo: cancels the planned statement of each of the info's tickets.
    fn cancel_flight_info(
        &self,
        body: &[u8],
    ) -> Result<arrow_flight::CancelFlightInfoResult, Status> {
        use arrow_flight::sql::{Any, Command};
        let request = arrow_flight::CancelFlightInfoRequest::decode(body).map_err(|e| {
            Status::invalid_argument(format!(
                "CancelFlightInfo needs a CancelFlightInfoRequest: {e}"
            ))
        })?;
        let info = request
            .info
            .ok_or_else(|| Status::invalid_argument("CancelFlightInfo names no FlightInfo"))?;
        let mut status = arrow_flight::CancelStatus::NotCancellable;
        for endpoint in info.endpoint {
            let Some(ticket) = endpoint.ticket else {
                continue;
            };
            let command = Any::decode(&*ticket.ticket)
                .map_err(|e| Status::invalid_argument(format!("not a lake ticket: {e}")))
                .and_then(|any| {
                    Command::try_from(any)
                        .map_err(|e| Status::invalid_argument(format!("not a lake ticket: {e}")))
                })?;
            // Only a statement's ticket names something that runs.
            let Command::TicketStatementQuery(ticket) = command else {
                continue;
            };
            if let Handle::Planned { id, .. } = self.handles.decode(&ticket.statement_handle)?
                && self.plans.cancel(id) == Cancel::Cancelled
            {
                status = arrow_flight::CancelStatus::Cancelled;
            }
        }
        Ok(arrow_flight::CancelFlightInfoResult {
            status: status as i32,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_action_is_listed_under_the_name_it_is_performed_by() {
        let listed = CustomAction::listed();
        assert_eq!(listed.len(), CustomAction::ALL.len());
        for action in CustomAction::ALL {
            assert_eq!(CustomAction::parse(action.name()), Some(action));
            assert!(listed.iter().any(|t| t.r#type == action.name()));
        }
        assert_eq!(CustomAction::parse("DropEverything"), None);
    }
}
