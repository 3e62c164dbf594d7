//! What a signed-in person may do in the inbox: the `role` of an
//! approvers-file entry and of `idem approver --role`.

use serde::Deserialize;

/// What a signed-in person may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// See and decide.
    Approver,
    /// See only.
    Viewer,
}

impl Role {
    /// `approver` or `viewer` (clap's parser of `idem approver --role`).
    pub fn parse(text: &str) -> Result<Role, String> {
        match text.trim() {
            "approver" => Ok(Role::Approver),
            "viewer" => Ok(Role::Viewer),
            _ => Err("expected approver (may decide) or viewer (may only look)".to_owned()),
        }
    }

    /// As written in the file.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Approver => "approver",
            Role::Viewer => "viewer",
        }
    }
}
