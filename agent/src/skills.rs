//! Skills: directories with a `SKILL.md` (a `name` and a `description` in its YAML front
//! matter, instructions below it, other files beside it), as the Claude Agent SDK has them.
//! An agent's skills are named and described in its system prompt; the model reads one with
//! the `load_skill` tool when it needs it.
//!
//! What it guarantees:
//! - **Checked at load.** A skill directory without a readable `SKILL.md`, front matter that
//!   is not YAML, a missing or malformed `name` (lowercase letters, digits and `-`, at most
//!   64) or `description` (at most 1024 characters), or two skills of one name are refused,
//!   naming the key and the file, before anything runs.
//! - **Stable bytes.** The prompt's section lists the skills in the config's order with their
//!   front matter's words; the tool's spec is a pure function of the skills. A skill's body
//!   or file reaches the model as a logged tool result, so a resumed run sees the same bytes.
//! - **Read-only and confined.** `load_skill` reads `SKILL.md` or a file beneath the skill's
//!   own directory (a path that leaves it, through `..` or a symlink, is refused), text only,
//!   at most [`MAX_FILE_BYTES`]; it changes nothing, so it is `read_only`.

use std::path::{Path, PathBuf};

use nightshift_llm::ToolSpec;
use serde_json::{Value, json};
use yaml_rust2::YamlLoader;

use crate::config::ConfigError;

/// The tool that reads a skill.
pub const LOAD_SKILL: &str = "load_skill";

/// The largest file `load_skill` returns.
pub const MAX_FILE_BYTES: u64 = 64 * 1024;

/// A skill as the config's directory holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skill {
    pub name: String,
    pub description: String,
    /// Its directory, absolute and canonical.
    pub dir: PathBuf,
}

/// Reads the skill in `dir` (relative to `base`), for agent `agent`'s `skills[index]`.
pub fn load(agent: &str, index: usize, base: &Path, dir: &Path) -> Result<Skill, ConfigError> {
    let key = format!("agents.{agent}.skills[{index}]");
    let joined = base.join(dir);
    let dir = joined.canonicalize().map_err(|e| {
        ConfigError::value(
            &key,
            format!(
                "is {}, which cannot be used ({e}): name a directory holding a SKILL.md",
                joined.display()
            ),
        )
    })?;
    let file = dir.join("SKILL.md");
    let text = std::fs::read_to_string(&file).map_err(|e| {
        ConfigError::value(
            &key,
            format!(
                "is {}, whose SKILL.md cannot be read ({e}): a skill is a directory with a \
                 SKILL.md",
                dir.display()
            ),
        )
    })?;
    let (name, description) = front_matter(&text)
        .map_err(|why| ConfigError::value(&key, format!("{}: {why}", file.display())))?;
    Ok(Skill {
        name,
        description,
        dir,
    })
}

/// The `name` and `description` of a `SKILL.md`'s front matter; `Err` says what is wrong.
pub fn front_matter(text: &str) -> Result<(String, String), String> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let rest = text
        .strip_prefix("---\n")
        .or_else(|| text.strip_prefix("---\r\n"))
        .ok_or("it does not begin with front matter (a line `---`, `name:` and `description:`, then `---`)")?;
    let end = rest
        .find("\n---")
        .ok_or("its front matter has no closing `---` line")?;
    let yaml = &rest[..end];
    let docs = YamlLoader::load_from_str(yaml)
        .map_err(|e| format!("its front matter is not YAML: {e}"))?;
    let doc = docs.first().ok_or("its front matter is empty")?;
    let name = doc["name"]
        .as_str()
        .ok_or("its front matter has no `name` (a string)")?
        .trim()
        .to_string();
    if name.is_empty()
        || name.len() > 64
        || !name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    {
        return Err(format!(
            "its name '{name}' is not allowed: use 1 to 64 lowercase letters, digits and '-'"
        ));
    }
    let description = doc["description"]
        .as_str()
        .ok_or("its front matter has no `description` (a string saying when to use it)")?
        .trim()
        .to_string();
    if description.is_empty() || description.chars().count() > 1024 {
        return Err(format!(
            "its description is {} characters: write 1 to 1024 saying what it does and when \
             to use it",
            description.chars().count()
        ));
    }
    Ok((name, description))
}

/// Refuses two skills of one name.
pub fn check_unique(agent: &str, skills: &[Skill]) -> Result<(), ConfigError> {
    for (i, skill) in skills.iter().enumerate() {
        if skills[..i].iter().any(|s| s.name == skill.name) {
            return Err(ConfigError::value(
                format!("agents.{agent}.skills[{i}]"),
                format!(
                    "is a second skill named '{}' ({}): skill names must be unique",
                    skill.name,
                    skill.dir.display()
                ),
            ));
        }
    }
    Ok(())
}

/// The system prompt's section naming the skills (empty without skills).
pub fn prompt_section(skills: &[Skill]) -> String {
    if skills.is_empty() {
        return String::new();
    }
    let mut out = String::from(
        "\n\n# Skills\n\nThese skills hold instructions for particular tasks. When a task \
         matches one, call load_skill with its name before you begin, and follow what it \
         says.\n\n",
    );
    for s in skills {
        out.push_str(&format!("- {}: {}\n", s.name, s.description));
    }
    out
}

/// The `load_skill` tool, for `skills`.
pub fn spec(skills: &[Skill]) -> ToolSpec {
    let names: Vec<&str> = skills.iter().map(|s| s.name.as_str()).collect();
    ToolSpec {
        name: LOAD_SKILL.into(),
        description: "Reads a skill: its SKILL.md instructions and the names of its other \
                      files, or, with `file`, one of those files."
            .into(),
        input_schema: json!({
            "type": "object",
            "properties": {
                "name": {"type": "string", "enum": names, "description": "The skill."},
                "file": {"type": "string",
                         "description": "A file of the skill, relative to its directory."}
            },
            "required": ["name"],
            "additionalProperties": false
        }),
    }
}

/// What `load_skill` answers for `input`: `Ok` the text, `Err` what the model is told.
pub fn read(skills: &[Skill], input: &Value) -> Result<String, String> {
    let name = input["name"].as_str().unwrap_or_default();
    let skill = skills.iter().find(|s| s.name == name).ok_or_else(|| {
        let known: Vec<&str> = skills.iter().map(|s| s.name.as_str()).collect();
        format!(
            "no skill is named '{name}'; the skills are: {}",
            known.join(", ")
        )
    })?;
    match input.get("file").and_then(Value::as_str) {
        None => {
            let text = read_text(&skill.dir.join("SKILL.md"))?;
            let files = files_of(&skill.dir);
            let mut out = text;
            if !files.is_empty() {
                out.push_str(&format!(
                    "\n\n[Other files of this skill, read with load_skill and `file`: {}]",
                    files.join(", ")
                ));
            }
            Ok(out)
        }
        Some(file) => {
            let path = skill
                .dir
                .join(file)
                .canonicalize()
                .map_err(|e| format!("the skill {name} has no file {file} ({e})"))?;
            if !path.starts_with(&skill.dir) || !path.is_file() {
                return Err(format!(
                    "{file} is not a file of the skill {name}: name one of its files, relative \
                     to its directory"
                ));
            }
            read_text(&path)
        }
    }
}

/// A file's text, refusing one too large or not UTF-8.
fn read_text(path: &Path) -> Result<String, String> {
    let size = std::fs::metadata(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?
        .len();
    if size > MAX_FILE_BYTES {
        return Err(format!(
            "{} is {size} bytes, over the {MAX_FILE_BYTES} a skill's file may be",
            path.display()
        ));
    }
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    String::from_utf8(bytes).map_err(|_| format!("{} is not text (UTF-8)", path.display()))
}

/// The skill's files other than `SKILL.md`, relative to its directory, sorted (at most 200).
fn files_of(dir: &Path) -> Vec<String> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            if kind.is_dir() {
                stack.push(path);
            } else if kind.is_file()
                && let Ok(rel) = path.strip_prefix(dir)
            {
                let rel = rel.to_string_lossy().into_owned();
                if rel != "SKILL.md" {
                    found.push(rel);
                }
            }
        }
    }
    found.sort();
    found.truncate(200);
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn skill_dir(root: &Path, dir: &str, md: &str) -> PathBuf {
        let d = root.join(dir);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("SKILL.md"), md).unwrap();
        d
    }

    #[test]
    fn front_matter_gives_the_name_and_description() {
        let (name, description) = front_matter(
            "---\nname: pdf-forms\ndescription: >\n  Fills PDF forms.\n  Use for forms.\nlicense: MIT\n---\n# Body\n",
        )
        .unwrap();
        assert_eq!(name, "pdf-forms");
        assert_eq!(description, "Fills PDF forms. Use for forms.");
        for (text, said) in [
            ("# no front matter", "does not begin with front matter"),
            ("---\nname: x\n", "no closing"),
            ("---\nname: [\n---\n", "not YAML"),
            ("---\ndescription: d\n---\n", "no `name`"),
            (
                "---\nname: Big Name\ndescription: d\n---\n",
                "is not allowed",
            ),
            ("---\nname: x\n---\n", "no `description`"),
        ] {
            let err = front_matter(text).unwrap_err();
            assert!(err.contains(said), "{text:?}: {err}");
        }
    }

    #[test]
    fn a_skill_is_read_whole_or_a_file_at_a_time_and_never_outside_its_directory() {
        let root = tempfile::tempdir().unwrap();
        let dir = skill_dir(
            root.path(),
            "review",
            "---\nname: review\ndescription: Reviews code.\n---\nCheck the tests first.\n",
        );
        std::fs::create_dir_all(dir.join("ref")).unwrap();
        std::fs::write(dir.join("ref/style.md"), "Short names.").unwrap();
        std::fs::write(root.path().join("secret.txt"), "no").unwrap();
        let skill = load("a", 0, root.path(), Path::new("review")).unwrap();
        let skills = [skill];
        let body = read(&skills, &json!({"name": "review"})).unwrap();
        assert!(body.starts_with("---\nname: review"), "{body}");
        assert!(body.contains("Check the tests first."));
        assert!(body.contains("ref/style.md"), "{body}");
        assert_eq!(
            read(&skills, &json!({"name": "review", "file": "ref/style.md"})).unwrap(),
            "Short names."
        );
        for escape in ["../secret.txt", "/etc/passwd", "ref"] {
            let err = read(&skills, &json!({"name": "review", "file": escape})).unwrap_err();
            assert!(
                err.contains("not a file of the skill") || err.contains("has no file"),
                "{escape}: {err}"
            );
        }
        #[cfg(unix)]
        {
            std::os::unix::fs::symlink(root.path().join("secret.txt"), dir.join("link")).unwrap();
            let err = read(&skills, &json!({"name": "review", "file": "link"})).unwrap_err();
            assert!(err.contains("not a file of the skill"), "{err}");
        }
        let err = read(&skills, &json!({"name": "other"})).unwrap_err();
        assert!(err.contains("the skills are: review"), "{err}");
    }

    #[test]
    fn bad_skills_are_refused_at_load_naming_the_key() {
        let root = tempfile::tempdir().unwrap();
        let err = load("a", 2, root.path(), Path::new("missing"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("agents.a.skills[2]"), "{err}");
        skill_dir(root.path(), "bad", "---\nname: Bad\ndescription: d\n---\n");
        let err = load("a", 0, root.path(), Path::new("bad"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("SKILL.md: its name 'Bad'"), "{err}");
        skill_dir(root.path(), "one", "---\nname: same\ndescription: d\n---\n");
        skill_dir(root.path(), "two", "---\nname: same\ndescription: e\n---\n");
        let skills = [
            load("a", 0, root.path(), Path::new("one")).unwrap(),
            load("a", 1, root.path(), Path::new("two")).unwrap(),
        ];
        let err = check_unique("a", &skills).unwrap_err().to_string();
        assert!(
            err.contains("agents.a.skills[1]") && err.contains("'same'"),
            "{err}"
        );
    }

    #[test]
    fn the_prompt_section_and_spec_are_stable() {
        let skills = vec![Skill {
            name: "review".into(),
            description: "Reviews code.".into(),
            dir: PathBuf::from("/s/review"),
        }];
        assert_eq!(prompt_section(&[]), "");
        assert!(prompt_section(&skills).ends_with("- review: Reviews code.\n"));
        assert_eq!(spec(&skills), spec(&skills.clone()));
        assert_eq!(
            spec(&skills).input_schema["properties"]["name"]["enum"],
            json!(["review"])
        );
    }
}
