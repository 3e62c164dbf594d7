use idem::prelude::*;
use idem::{KeyMaterial, KeySpec};
use std::time::Duration;

#[derive(Clone, serde::Deserialize, serde::Serialize, schemars::JsonSchema)]
pub struct Customer {
    pub email: String,
    pub country: String,
    pub tags: Vec<String>,
}

/// Explicitly the default key.
#[tool(class = "idempotent_write", key = default)]
async fn touch(_args: Customer) -> Result<(), ToolError> {
    Ok(())
}

mod normalize {
    pub fn email(email: &str) -> String {
        email.trim().to_lowercase()
    }
}

fn tag_count(tags: &Vec<String>) -> usize {
    tags.len()
}

/// Find or create a customer.
#[tool(
    class = "non_idempotent_write",
    key = natural(fields(email = normalize::email, country, tags = tag_count), window = "250ms"),
)]
async fn find_or_create(_args: Customer) -> Result<(), ToolError> {
    Ok(())
}

/// A natural key without a window.
#[tool(class = "idempotent_write", key = natural(fields(country)))]
async fn by_country(_args: Customer) -> Result<(), ToolError> {
    Ok(())
}

fn customer_key(args: &Customer) -> &str {
    &args.email
}

/// A custom key.
#[tool(class = "irreversible", key = custom(customer_key))]
async fn erase(_args: Customer) -> Result<(), ToolError> {
    Ok(())
}

fn main() {
    let args = Customer {
        email: " A@B.C ".into(),
        country: "FR".into(),
        tags: vec!["x".into()],
    };
    assert_eq!(touch::SPEC.key, KeySpec::Default);
    assert_eq!(touch::key_material(&args), None);
    assert_eq!(
        find_or_create::SPEC.key,
        KeySpec::Natural {
            fields: &["email", "country", "tags"],
            window: Some(Duration::from_millis(250)),
        }
    );
    assert_eq!(
        find_or_create::key_material(&args),
        Some(KeyMaterial::Natural(serde_json::json!({
            "email": "a@b.c", "country": "FR", "tags": 1
        })))
    );
    assert_eq!(
        by_country::SPEC.key,
        KeySpec::Natural { fields: &["country"], window: None }
    );
    assert_eq!(erase::SPEC.key, KeySpec::Custom);
    assert_eq!(
        erase::key_material(&args),
        Some(KeyMaterial::Custom(" A@B.C ".into()))
    );
}
