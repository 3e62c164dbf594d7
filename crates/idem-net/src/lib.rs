//! The network plumbing of idem, written once: the certificate authorities
//! a TLS client trusts ([`roots`]), what a TLS failure means to a person
//! ([`tls_error`]), an HTTP client ([`client`], feature `client`) and
//! where it may send requests ([`destination`]), HTTPS
//! for idem's own servers, how they stop and their probes, the `Host`
//! names they answer to and their connections' limits ([`server`],
//! [`stop`], [`health`], [`hosts`], [`serve`], feature `server`), bearer-token
//! digests ([`token`]) and globs of names ([`glob`]). The stores
//! (`idem-redis`, `idem-postgres`), the MCP server and proxy (`idem-mcp`)
//! and the approval inbox (`idem-inbox`) all use these, so that a fix to
//! one reaches every one.
//!
//! A crate of its own rather than a module of `idem-runtime`: the runtime
//! is the library every user builds, and needs no TLS, no HTTP and no
//! glob; here rustls, rustls-native-certs and glob (and, by feature, hyper
//! and axum) are the dependencies of the crates that make connections
//! only. The stores take the default features (roots, TLS failures),
//! which bring nothing they did not already build.
//!
//! ```
//! use idem_net::glob::Glob;
//! use idem_net::token::TokenDigest;
//!
//! assert!(Glob::new("charge_*")?.matches("charge_card"));
//! let digest = TokenDigest::of("idem_secret");
//! assert_eq!(TokenDigest::parse(&digest.to_string()), Some(digest));
//! # Ok::<(), idem_net::glob::GlobError>(())
//! ```

#[cfg(feature = "client")]
pub mod client;
#[cfg(feature = "client")]
pub mod destination;
pub mod glob;
#[cfg(feature = "server")]
pub mod health;
#[cfg(feature = "server")]
pub mod hosts;
pub mod roots;
#[cfg(feature = "server")]
pub mod serve;
#[cfg(feature = "server")]
pub mod server;
#[cfg(feature = "server")]
pub mod stop;
pub mod tls_error;
pub mod token;
