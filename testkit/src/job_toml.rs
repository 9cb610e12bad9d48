//! A minimal valid job file as text, for tests of the job file itself: Kafka topic `in` at
//! `127.0.0.1:9092` keyed by `user` with event time `ts`, a 10 s tumbling window, one `events`
//! count, a model in `model` and the sink topics `out` and `dlq`. A test adds fields, features,
//! a `[runtime]` section or another `[model]` body, then edits the text it renders.

/// A minimal job under construction; [`MinimalJob::text`] renders it.
#[derive(Clone, Debug)]
pub struct MinimalJob {
    runtime: Option<String>,
    fields: Vec<String>,
    features: Vec<String>,
    model: String,
}

/// The minimal job: no `[runtime]`, only the `user` and `ts` fields, the `events` count and
/// `[model] path = "model"`.
pub fn minimal_job() -> MinimalJob {
    MinimalJob {
        runtime: None,
        fields: Vec::new(),
        features: vec!["name = \"events\"\nagg = \"count\"".to_owned()],
        model: "path = \"model\"".to_owned(),
    }
}

impl MinimalJob {
    /// A `[runtime]` section with body `body`, after the job's name.
    pub fn runtime(mut self, body: &str) -> Self {
        self.runtime = Some(body.to_owned());
        self
    }

    /// One more `[source.fields]` line, e.g. `kind = "string"`, after `user` and `ts`.
    pub fn field(mut self, line: &str) -> Self {
        self.fields.push(line.to_owned());
        self
    }

    /// One more `[[features]]` table with body `body`, after the ones before.
    pub fn feature(mut self, body: &str) -> Self {
        self.features.push(body.to_owned());
        self
    }

    /// The `[model]` section's body instead of `path = "model"`.
    pub fn model(mut self, body: &str) -> Self {
        self.model = body.to_owned();
        self
    }

    /// The job file: one section a paragraph, a blank line before the first and a newline
    /// after the last.
    pub fn text(&self) -> String {
        let mut sections = vec!["name = \"t\"".to_owned()];
        if let Some(body) = &self.runtime {
            sections.push(format!("[runtime]\n{body}"));
        }
        sections.push("[kafka]\n\"bootstrap.servers\" = \"127.0.0.1:9092\"".to_owned());
        sections.push("[source]\ntopic = \"in\"\nkey = \"user\"\nevent_time = \"ts\"".to_owned());
        let fields: String = self.fields.iter().map(|f| format!("\n{f}")).collect();
        sections.push(format!(
            "[source.fields]\nuser = \"string\"\nts = \"timestamp_ms\"{fields}"
        ));
        sections.push("[window]\nkind = \"tumbling\"\nsize = \"10s\"".to_owned());
        sections.extend(self.features.iter().map(|f| format!("[[features]]\n{f}")));
        sections.push(format!("[model]\n{}", self.model));
        sections.push("[sink]\ntopic = \"out\"\ndead_letter_topic = \"dlq\"".to_owned());
        format!("\n{}\n", sections.join("\n\n"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_minimal_job_reads_as_a_job_file_writes_it() {
        let text = minimal_job()
            .runtime("workers = 1")
            .field("kind = \"string\"")
            .feature("name = \"n\"\nagg = \"sum\"\nfield = \"x\"")
            .text();
        let expected = "\nname = \"t\"\n\n[runtime]\nworkers = 1\n\n\
            [kafka]\n\"bootstrap.servers\" = \"127.0.0.1:9092\"\n\n\
            [source]\ntopic = \"in\"\nkey = \"user\"\nevent_time = \"ts\"\n\n\
            [source.fields]\nuser = \"string\"\nts = \"timestamp_ms\"\nkind = \"string\"\n\n\
            [window]\nkind = \"tumbling\"\nsize = \"10s\"\n\n\
            [[features]]\nname = \"events\"\nagg = \"count\"\n\n\
            [[features]]\nname = \"n\"\nagg = \"sum\"\nfield = \"x\"\n\n\
            [model]\npath = \"model\"\n\n\
            [sink]\ntopic = \"out\"\ndead_letter_topic = \"dlq\"\n";
        assert_eq!(text, expected);
        let parsed: toml::Table = toml::from_str(&text).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(parsed.len(), 8, "{parsed:?}");
    }
}
