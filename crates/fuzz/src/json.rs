//! Structure-aware JSON inputs: a list of edits, drawn by bolero, applied to a real capture from a corpus.
//!
//! Random bytes almost never get past a JSON parser, and a random JSON tree almost never has the keys a decoder
//! looks for. Editing captures keeps the shape a real answer has (the keys, the nesting, the `@odata` links) and
//! changes what a careless decoder trusts: a value's type, a missing member, an empty string, a huge number.
//! The words edits insert are harvested from the captures themselves, so the vocabulary follows the corpus.

use bolero::generator::TypeGenerator;
use serde_json::{Map, Number, Value};

/// What a target draws: which capture to start from, the edits, and where to cut the serialised text.
#[derive(Clone, Debug, TypeGenerator)]
pub struct Edits {
    /// An index into the captures, modulo their number plus one (the extra one starts from `{}`).
    pub base: u16,
    pub ops: Vec<Op>,
    /// Cut the serialised document after this many bytes (a body the BMC stopped sending).
    pub truncate: Option<u16>,
}

/// One edit at the node a path leads to.
#[derive(Clone, Debug, TypeGenerator)]
pub enum Op {
    /// Replace the node.
    Replace { path: Vec<u8>, with: Node },
    /// Remove the node from its parent.
    Remove { path: Vec<u8> },
    /// Add a member to the object at the path (replacing one of the same name).
    Insert { path: Vec<u8>, key: Word, value: Node },
    /// Append to the array at the path.
    Push { path: Vec<u8>, value: Node },
}

/// A value to put in: scalars of every JSON type, and shallow containers (edits nest them further).
#[derive(Clone, Debug, TypeGenerator)]
pub enum Node {
    Null,
    Bool(bool),
    Int(i64),
    UInt(u64),
    Float(f64),
    Text(Word),
    Array(Vec<Word>),
    Object(Vec<(Word, Word)>),
    EmptyArray,
    EmptyObject,
}

/// A string: mostly one seen in the captures (a key or a value), sometimes an arbitrary one.
#[derive(Clone, Debug, TypeGenerator)]
pub enum Word {
    Seen(u16),
    Any(String),
    Empty,
}

/// The captures edits start from, and the words seen in them.
#[derive(Clone, Debug, Default)]
pub struct Captures {
    pub documents: Vec<Value>,
    words: Vec<String>,
}

impl Captures {
    /// Parses every input that is JSON (others are left to the byte-level targets) and harvests its keys and
    /// string values.
    pub fn from_corpus(inputs: &[(String, Vec<u8>)]) -> Self {
        let documents: Vec<Value> = inputs
            .iter()
            .filter_map(|(_, bytes)| serde_json::from_slice(bytes).ok())
            .collect();
        let mut words = Vec::new();
        for d in &documents {
            harvest(d, &mut words);
        }
        words.sort();
        words.dedup();
        Captures { documents, words }
    }

    /// The edited document, serialised (and cut, when the edits say so).
    pub fn apply(&self, edits: &Edits) -> Vec<u8> {
        let base = usize::from(edits.base) % (self.documents.len() + 1);
        let mut doc = self
            .documents
            .get(base)
            .cloned()
            .unwrap_or_else(|| Value::Object(Map::new()));
        for op in &edits.ops {
            self.apply_op(&mut doc, op);
        }
        let mut bytes = serde_json::to_vec(&doc).unwrap_or_default();
        if let Some(at) = edits.truncate {
            bytes.truncate(usize::from(at));
        }
        bytes
    }

    fn apply_op(&self, doc: &mut Value, op: &Op) {
        match op {
            Op::Replace { path, with } => *walk(doc, path) = self.node(with),
            Op::Remove { path } => {
                let Some((last, parent)) = path.split_last() else {
                    *doc = Value::Null;
                    return;
                };
                match walk(doc, parent) {
                    Value::Object(m) if !m.is_empty() => {
                        let key = m.keys().nth(usize::from(*last) % m.len()).cloned();
                        if let Some(key) = key {
                            m.remove(&key);
                        }
                    }
                    Value::Array(a) if !a.is_empty() => {
                        let at = usize::from(*last) % a.len();
                        a.remove(at);
                    }
                    _ => {}
                }
            }
            Op::Insert { path, key, value } => {
                if let Value::Object(m) = walk(doc, path) {
                    m.insert(self.word(key), self.node(value));
                }
            }
            Op::Push { path, value } => {
                if let Value::Array(a) = walk(doc, path) {
                    a.push(self.node(value));
                }
            }
        }
    }

    fn word(&self, w: &Word) -> String {
        match w {
            Word::Seen(i) if !self.words.is_empty() => self.words[usize::from(*i) % self.words.len()].clone(),
            Word::Seen(_) | Word::Empty => String::new(),
            Word::Any(s) => s.clone(),
        }
    }

    fn node(&self, n: &Node) -> Value {
        match n {
            Node::Null => Value::Null,
            Node::Bool(b) => Value::Bool(*b),
            Node::Int(i) => Value::from(*i),
            Node::UInt(u) => Value::from(*u),
            // JSON has no NaN or infinity: those become null, as serde_json would write them.
            Node::Float(f) => Number::from_f64(*f).map_or(Value::Null, Value::Number),
            Node::Text(w) => Value::String(self.word(w)),
            Node::Array(ws) => Value::Array(ws.iter().map(|w| Value::String(self.word(w))).collect()),
            Node::Object(kvs) => Value::Object(
                kvs.iter()
                    .map(|(k, v)| (self.word(k), Value::String(self.word(v))))
                    .collect(),
            ),
            Node::EmptyArray => Value::Array(Vec::new()),
            Node::EmptyObject => Value::Object(Map::new()),
        }
    }
}

/// The node a path of child indices leads to (each modulo the children there), stopping at a leaf.
fn walk<'a>(at: &'a mut Value, path: &[u8]) -> &'a mut Value {
    let Some((step, rest)) = path.split_first() else {
        return at;
    };
    let len = match &*at {
        Value::Object(m) => m.len(),
        Value::Array(a) => a.len(),
        _ => 0,
    };
    if len == 0 {
        return at;
    }
    let index = usize::from(*step) % len;
    match at {
        Value::Object(m) => walk(
            m.values_mut()
                .nth(index)
                .expect("an index modulo the length is in range"),
            rest,
        ),
        Value::Array(a) => walk(&mut a[index], rest),
        other => other,
    }
}

fn harvest(v: &Value, words: &mut Vec<String>) {
    match v {
        Value::String(s) => words.push(s.clone()),
        Value::Array(a) => a.iter().for_each(|x| harvest(x, words)),
        Value::Object(m) => {
            for (k, x) in m {
                words.push(k.clone());
                harvest(x, words);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn captures() -> Captures {
        Captures::from_corpus(&[
            (
                "a.json".into(),
                br#"{"PowerState":"On","Members":[{"@odata.id":"/x"}]}"#.to_vec(),
            ),
            ("b.txt".into(), b"not json".to_vec()),
        ])
    }

    #[test]
    fn edits_follow_paths_into_the_capture() {
        let c = captures();
        assert_eq!(c.documents.len(), 1);
        assert!(c.words.contains(&"PowerState".to_owned()) && c.words.contains(&"/x".to_owned()));
        // Paths count members in the map's own order (sorted, or as parsed with serde_json's preserve_order).
        let position = |key: &str| {
            c.documents[0]
                .as_object()
                .and_then(|m| m.keys().position(|k| k == key))
        };
        let members = position("Members").expect("members") as u8;
        let power = position("PowerState").expect("power") as u8;
        let edits = Edits {
            base: 0,
            ops: vec![
                Op::Replace {
                    path: vec![power],
                    with: Node::UInt(u64::MAX),
                },
                Op::Remove {
                    path: vec![members, 0, 0],
                },
                Op::Push {
                    path: vec![members],
                    value: Node::Float(f64::NAN),
                },
            ],
            truncate: None,
        };
        let out: Value = serde_json::from_slice(&c.apply(&edits)).expect("json");
        assert_eq!(out["PowerState"], Value::from(u64::MAX));
        assert_eq!(out["Members"], serde_json::json!([{}, null]));
    }

    #[test]
    fn the_extra_base_is_an_empty_object_and_truncation_cuts() {
        let c = captures();
        let edits = Edits {
            base: 1,
            ops: vec![Op::Insert {
                path: vec![],
                key: Word::Any("k".into()),
                value: Node::Text(Word::Empty),
            }],
            truncate: Some(4),
        };
        assert_eq!(c.apply(&edits), br#"{"k""#.to_vec());
    }
}
