//! An agent's checkout templates (`[agents.workspace] checkout = { repo, ref, depth }`),
//! rendered into the context of the runs a delivery starts.
//!
//! Guarantees: the templates are compiled with the route they ride on when the config is
//! loaded (a syntax error stops the start), rendered with the route's other templates over
//! the same payload (so a redelivery renders the same checkout), and a template that reads a
//! path the payload lacks refuses the delivery naming it, like a prompt template. A run not
//! started by a delivery renders them over its stored context ([`CheckoutTemplates::render_over`]).

use minijinja::{Environment, UndefinedBehavior};
use serde_json::{Value as Json, json};

use super::error::{CheckoutTemplateError, ConfigError};

/// The names the templates have among a route's.
pub(crate) const REPO: &str = "checkout.repo";
pub(crate) const REF: &str = "checkout.ref";

/// What `[agents.workspace] checkout` says, as templates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckoutTemplates {
    /// `owner/name`, e.g. `{{ repository.full_name }}`.
    pub repo: String,
    /// A commit SHA, branch or tag, e.g. `{{ pull_request.head.sha }}`.
    pub git_ref: String,
    pub depth: Option<u32>,
}

impl CheckoutTemplates {
    /// Compiles the templates into `env`; `at` names the route in errors.
    pub(crate) fn add_to(
        &self,
        env: &mut Environment<'static>,
        at: &str,
    ) -> Result<(), ConfigError> {
        for (name, source) in [(REPO, &self.repo), (REF, &self.git_ref)] {
            env.add_template_owned(name, source.clone()).map_err(|e| {
                ConfigError::value(
                    format!("{at} (its agent's workspace.{name})"),
                    format!("is not a valid template: {e:#}"),
                )
            })?;
        }
        Ok(())
    }

    /// The run context's `workspace` value for a rendered repository and ref.
    pub fn rendered(&self, repo: &str, git_ref: &str) -> Json {
        json!({"repo": repo.trim(), "ref": git_ref.trim(), "depth": self.depth})
    }

    /// Renders the templates over `context` (a run's stored context, `github.repo` and so
    /// on); the error says which template failed and why.
    pub fn render_over(&self, context: &Json) -> Result<Json, CheckoutTemplateError> {
        let mut env = Environment::new();
        env.set_undefined_behavior(UndefinedBehavior::Strict);
        let ctx = super::context::template_value(context);
        let mut out = Vec::new();
        for (name, source) in [(REPO, &self.repo), (REF, &self.git_ref)] {
            let text = env.render_str(source, &ctx).map_err(|source_error| {
                CheckoutTemplateError::Failed {
                    name,
                    template: source.clone(),
                    source: source_error,
                }
            })?;
            if text.trim().is_empty() {
                return Err(CheckoutTemplateError::Empty {
                    name,
                    template: source.clone(),
                });
            }
            out.push(text);
        }
        Ok(self.rendered(&out[0], &out[1]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_render_over_a_context_or_say_what_is_missing() {
        let t = CheckoutTemplates {
            repo: "{{ github.repo }}".into(),
            git_ref: "main".into(),
            depth: Some(1),
        };
        assert_eq!(
            t.render_over(&json!({"github": {"repo": "o/r"}})).unwrap(),
            json!({"repo": "o/r", "ref": "main", "depth": 1})
        );
        let e = t.render_over(&json!({})).unwrap_err().to_string();
        assert!(
            e.contains("checkout.repo") && e.contains("undefined"),
            "{e}"
        );
        let blank = CheckoutTemplates {
            repo: "{{ github.repo }}".into(),
            git_ref: " ".into(),
            depth: None,
        };
        assert_eq!(
            blank
                .render_over(&json!({"github": {"repo": "o/r"}}))
                .unwrap_err()
                .to_string(),
            "the checkout.ref template \" \" rendered nothing"
        );
    }
}
