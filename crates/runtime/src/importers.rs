//! Scanner-report importers: detection and conversion, each call bounded
//! like a resource call.

use super::*;

/// What a loaded report importer converts, for health and logs.
#[derive(Debug, Clone)]
pub struct ImporterInfo {
    /// The format's name (`trivy`), as `--format` takes it.
    pub format: String,
    pub version: String,
    pub description: String,
    pub file: PathBuf,
    pub sha256: String,
    pub wit_version: String,
    pub loaded_at: String,
}

/// One validated, pre-instantiated report importer.
pub struct LoadedImporter {
    pub info: ImporterInfo,
    pub(super) pre: ReportImporterPre<CallState>,
}

/// Why a conversion failed.
#[derive(Debug)]
pub enum ConvertError {
    /// The importer refused the report (the caller's fault).
    Report(ImporterError),
    /// It ran past its deadline.
    Timeout,
    /// It trapped (a memory cap, a panic) or broke the contract.
    Failed(String),
}

impl LoadedImporter {
    pub(super) fn from_compiled(
        engine: &ComponentEngine,
        file: &Path,
        compiled: Compiled,
    ) -> anyhow::Result<LoadedImporter> {
        let Compiled { component, sha256, wit_version, .. } = compiled;
        let mut linker = wasi_linker(engine)?;
        ReportImporter::add_to_linker::<CallState, HasSelf<CallState>>(&mut linker, |state| state)
            .map_err(|e| anyhow!("linking the esr imports: {e:#}"))?;
        let pre = linker
            .instantiate_pre(&component)
            .map_err(|error| anyhow!("{}: imports what the host does not offer: {error:#}", file.display()))?;
        let pre = ReportImporterPre::new(pre)
            .map_err(|error| anyhow!("{}: does not match the report-importer world: {error:#}", file.display()))?;
        let mut importer = LoadedImporter {
            info: ImporterInfo {
                format: String::new(),
                version: String::new(),
                description: String::new(),
                file: file.to_path_buf(),
                sha256,
                wit_version,
                loaded_at: esr_system::clock::now_rfc3339(),
            },
            pre,
        };
        let described = importer
            .call_loading(engine, |instance, store| instance.esr_plugin_importer().call_describe(store))
            .map_err(|error| anyhow!("{}: describe() failed: {error:?}", file.display()))?;
        let format_is_sane = (1..=32).contains(&described.format.len())
            && described.format.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
        if !format_is_sane || described.format == "auto" {
            bail!(
                "{}: describe() gives the format {:?}; a format is lowercase letters, digits and dashes, and not `auto`",
                file.display(),
                described.format
            );
        }
        if described.version.trim().is_empty() || described.version.len() > 64 {
            bail!("{}: describe() gives no usable version", file.display());
        }
        importer.info.format = described.format;
        importer.info.version = described.version;
        importer.info.description = described.description.chars().take(512).collect();
        // A smoke call: detect on a trivial report must give an answer.
        importer
            .call_loading(engine, |instance, store| instance.esr_plugin_importer().call_detect(store, b"{}"))
            .map_err(|error| anyhow!("{}: fails its smoke call (detect): {error:?}", file.display()))?;
        Ok(importer)
    }

    /// One call into a fresh instance, with the importers' limits.
    pub(super) fn call<T>(
        &self,
        engine: &ComponentEngine,
        request_id: &str,
        run: impl FnOnce(&ReportImporter, &mut Store<CallState>) -> wasmtime::Result<T>,
    ) -> Result<T, ConvertError> {
        self.call_limited(engine, &engine.importer_limits, request_id, run)
    }

    /// A call at load, with every component's limits: the importers' own
    /// (`--importer-deadline-ms`, `--importer-memory-mib`) bound the
    /// reading of reports, not the loading.
    pub(super) fn call_loading<T>(
        &self,
        engine: &ComponentEngine,
        run: impl FnOnce(&ReportImporter, &mut Store<CallState>) -> wasmtime::Result<T>,
    ) -> Result<T, ConvertError> {
        self.call_limited(engine, &engine.limits, "load", run)
    }

    pub(super) fn call_limited<T>(
        &self,
        engine: &ComponentEngine,
        limits: &Limits,
        request_id: &str,
        run: impl FnOnce(&ReportImporter, &mut Store<CallState>) -> wasmtime::Result<T>,
    ) -> Result<T, ConvertError> {
        let group = format!("import-{}", self.info.format);
        let mut store = new_store_limited(engine, limits, &group, None, request_id);
        let result = self.pre.instantiate(&mut store).and_then(|instance| run(&instance, &mut store));
        match finish(&store, result.map(Ok)) {
            Ok(value) => Ok(value),
            Err(CallError::Timeout | CallError::Abandoned) => Err(ConvertError::Timeout),
            Err(CallError::Failed(reason) | CallError::Unavailable(reason)) => Err(ConvertError::Failed(reason)),
            Err(CallError::Plugin(error)) => Err(ConvertError::Failed(format!("{error:?}"))),
        }
    }
}
