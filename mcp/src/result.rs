//! An MCP tool result as the model reads it: one text, an error or not.
//!
//! What it guarantees: nothing the server returned is silently dropped. Text blocks are kept
//! in order; an image, audio or binary resource is named with its type and size (its bytes
//! are not text a model reads here); an embedded text resource keeps its text under its URI;
//! a resource link is named; `structuredContent` is given as JSON when the blocks do not
//! carry it already. `isError` makes the result an error the model sees, never a crash. The
//! text is cut, redacted and stored by the caller like any tool output.

use nightshift_tools::ToolOutput;
use rmcp::model::{CallToolResult, ContentBlock, ResourceContents};

/// `result` as the model reads it.
pub fn to_output(result: &CallToolResult) -> ToolOutput {
    let mut parts: Vec<String> = result.content.iter().map(block_text).collect();
    if let Some(structured) = &result.structured_content {
        let json = serde_json::to_string(structured).unwrap_or_default();
        if !parts.iter().any(|p| p.contains(&json)) {
            parts.push(json);
        }
    }
    let text = parts.join("\n");
    if result.is_error == Some(true) {
        ToolOutput::error(if text.is_empty() {
            "the tool answered with an error and no text".to_string()
        } else {
            text
        })
    } else {
        ToolOutput::ok(text)
    }
}

/// One block as text.
fn block_text(block: &ContentBlock) -> String {
    match block {
        ContentBlock::Text(t) => t.text.clone(),
        ContentBlock::Image(i) => format!(
            "[image {}, {} bytes, not shown]",
            i.mime_type,
            base64_len(&i.data)
        ),
        ContentBlock::Audio(a) => format!(
            "[audio {}, {} bytes, not shown]",
            a.mime_type,
            base64_len(&a.data)
        ),
        ContentBlock::Resource(r) => match &r.resource {
            ResourceContents::TextResourceContents { uri, text, .. } => {
                format!("[resource {uri}]\n{text}")
            }
            ResourceContents::BlobResourceContents {
                uri,
                mime_type,
                blob,
                ..
            } => format!(
                "[resource {uri} ({}), {} bytes, not shown]",
                mime_type.as_deref().unwrap_or("binary"),
                base64_len(blob)
            ),
            #[allow(unreachable_patterns)]
            _ => "[a resource of a kind this client does not know]".to_string(),
        },
        ContentBlock::ResourceLink(l) => format!("[resource link {} ({})]", l.uri, l.name),
        #[allow(unreachable_patterns)]
        _ => "[a content block of a kind this client does not know]".to_string(),
    }
}

/// The decoded size of base64 text (padding taken off).
fn base64_len(data: &str) -> usize {
    let trimmed = data.trim_end_matches('=');
    trimmed.len() * 3 / 4
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(json: serde_json::Value) -> CallToolResult {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn blocks_become_one_text_in_order() {
        let r = result(serde_json::json!({"content": [
            {"type": "text", "text": "first"},
            {"type": "image", "data": "aGVsbG8=", "mimeType": "image/png"},
            {"type": "resource", "resource": {"uri": "file:///a.txt", "text": "inside"}},
            {"type": "resource_link", "uri": "file:///b", "name": "b"},
            {"type": "text", "text": "last"}
        ]}));
        let out = to_output(&r);
        assert!(!out.is_error);
        assert_eq!(
            out.content,
            "first\n[image image/png, 5 bytes, not shown]\n[resource file:///a.txt]\ninside\n\
             [resource link file:///b (b)]\nlast"
        );
    }

    #[test]
    fn structured_content_is_given_once_and_is_error_is_an_error() {
        let r = result(serde_json::json!({"content": [], "structuredContent": {"n": 1}}));
        assert_eq!(to_output(&r).content, "{\"n\":1}");
        let r = result(
            serde_json::json!({"content": [{"type": "text", "text": "{\"n\":1}"}],
                                          "structuredContent": {"n": 1}}),
        );
        assert_eq!(to_output(&r).content, "{\"n\":1}", "not twice");
        let r = result(
            serde_json::json!({"content": [{"type": "text", "text": "no such repo"}],
                                          "isError": true}),
        );
        let out = to_output(&r);
        assert!(out.is_error && out.content == "no such repo");
        let r = result(serde_json::json!({"content": [], "isError": true}));
        assert!(to_output(&r).content.contains("no text"));
    }
}
