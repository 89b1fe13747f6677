//! outbox-router's benchmark build of DeltaForge puts this file in place of
//! `crates/processors/src/js.rs`: the JavaScript processor embeds V8 through `deno_core`,
//! whose build script downloads a prebuilt V8 library from a code host, and this
//! project's machines reach package registries only. The benchmarks use DeltaForge's
//! native outbox processor; a pipeline asking for a JavaScript processor is refused at
//! start, never run differently.

use anyhow::{Result, bail};
use async_trait::async_trait;
use deltaforge_core::{BatchContext, Event, Processor};

/// Never constructed in this build.
pub struct JsProcessor {
    id: String,
}

impl JsProcessor {
    pub fn new(id: String, _inline: String) -> Result<Self> {
        bail!(
            "processor {id:?}: this DeltaForge build has no JavaScript processor \
             (deno_core/V8 cannot be built without a code host; see outbox-router's \
             bench/deltaforge/build)"
        )
    }
}

#[async_trait]
impl Processor for JsProcessor {
    fn id(&self) -> &str {
        &self.id
    }

    async fn process(&self, _events: Vec<Event>, _ctx: &BatchContext) -> Result<Vec<Event>> {
        bail!("no JavaScript processor in this build")
    }
}
