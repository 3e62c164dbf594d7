//! Slack's side of the Approve and Deny buttons, below the handlers:
//! checking that a request is Slack's ([`verify`]) and where a decision's
//! outcome may be posted ([`reply`]). The handler that takes the clicks
//! is `clicks`.

pub(crate) mod reply;
pub(crate) mod verify;

use idem_net::client::HttpClient;

/// What `idem serve` needs to take Slack's clicks.
#[derive(Debug)]
pub(crate) struct Slack {
    /// The signing secret, and the requests let in.
    pub verifier: verify::Verifier,
    /// Where outcomes may be posted.
    pub replies: reply::Replies,
    /// The client that posts them.
    pub client: HttpClient,
    /// The inbox's origin, for the link to a record's page.
    pub inbox: String,
}
