//! What an application's tools are, written down for programs that do not
//! link them: the `idem serve` approval inbox shows a person the tool's
//! description and class beside the call they are asked to decide.
//!
//! Records keep the tool's name, not its description or class (those are
//! fixed at compile time, and the same for every call). An application
//! writes its [`Catalog`] once, at start-up or build time
//! ([`Registry::catalog`](crate::registry::Registry::catalog)), and the
//! inbox reads the file (`idem serve --tools FILE`).
//!
//! ```
//! use idem_runtime::catalog::Catalog;
//! use idem_runtime::class::ClassKind;
//!
//! let text = r#"{"idem_tool_catalog": 1, "tools": [
//!     {"name": "refund", "description": "Refund a charge.", "class": "irreversible",
//!      "store_args": true, "ttl_ms": 86400000}
//! ]}"#;
//! let catalog = Catalog::from_json(text).unwrap();
//! assert_eq!(catalog.tool("refund").unwrap().class, ClassKind::Irreversible);
//! assert_eq!(Catalog::from_json(&catalog.to_json()).unwrap(), catalog);
//! ```

use serde::{Deserialize, Serialize};

use crate::class::ClassKind;

/// The version of the catalog format this idem writes and reads.
pub const CATALOG_FORMAT: u32 = 1;

/// An application's tools: name, description, class and what is stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Catalog {
    /// [`CATALOG_FORMAT`].
    pub idem_tool_catalog: u32,
    /// One entry per tool, in registration order.
    pub tools: Vec<CatalogTool>,
}

/// One tool of a [`Catalog`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CatalogTool {
    /// The tool's name, as the model calls it and records name it.
    pub name: String,
    /// The description shown to the model.
    pub description: String,
    /// Its class.
    pub class: ClassKind,
    /// Whether its canonical arguments are kept with its records (`false`:
    /// only their fingerprint is).
    pub store_args: bool,
    /// How long its outcomes are kept, when the tool says (else the
    /// executor's default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_ms: Option<u64>,
}

/// A catalog that could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CatalogError {
    /// Not JSON, or not a catalog.
    #[error("not an idem tool catalog: {0}")]
    Malformed(#[from] serde_json::Error),
    /// Written by a newer idem.
    #[error("the tool catalog is format {found}, and this idem reads format {CATALOG_FORMAT}; upgrade idem")]
    Newer {
        /// The format it says.
        found: u32,
    },
}

impl Catalog {
    /// The entry for `tool`, if the catalog has one.
    pub fn tool(&self, name: &str) -> Option<&CatalogTool> {
        self.tools.iter().find(|t| t.name == name)
    }

    /// The catalog as pretty JSON, to write to a file.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a catalog serializes")
    }

    /// Read a catalog written by [`Catalog::to_json`] (this idem or an
    /// older one).
    pub fn from_json(text: &str) -> Result<Catalog, CatalogError> {
        let catalog: Catalog = serde_json::from_str(text)?;
        if catalog.idem_tool_catalog > CATALOG_FORMAT {
            return Err(CatalogError::Newer {
                found: catalog.idem_tool_catalog,
            });
        }
        Ok(catalog)
    }
}
