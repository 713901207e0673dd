//! The WIT glue: [`export_resource_plugin!`](crate::export_resource_plugin),
//! [`export_document_plugin!`](crate::export_document_plugin) and
//! [`export_report_importer!`](crate::export_report_importer) turn a
//! plugin type into a component of the `esr:plugin` package.
//!
//! The macros expand in the plugin crate, so the bindings (and their type
//! section) belong to that crate's world alone. The WIT comes from this
//! crate (`wit/plugin.wit`, package [`WIT_PACKAGE`](crate::WIT_PACKAGE)), so
//! a plugin builds wherever it lives and depends on nothing but the SDK
//! (named `esr_plugin_sdk`, the path the bindings' runtime is found by). On
//! targets other than `wasm32` they expand to nothing, so plugin logic
//! tests natively.

/// `report_panics()`, which each export calls first. Built without WASI
/// (`wasm32-unknown-unknown`, as `make plugins` builds the read
/// components) a panic's message has no stderr to go to and the host would
/// see only the trap; the hook sends it to the host's log, which names the
/// component and the request. With WASI the standard hook already writes
/// it to the stderr the host reads.
#[doc(hidden)]
#[macro_export]
macro_rules! __esr_panic_log {
    () => {
        fn report_panics() {
            #[cfg(target_os = "unknown")]
            std::panic::set_hook(Box::new(|info| {
                esr::plugin::log::write(esr::plugin::log::Level::Error, &info.to_string());
            }));
        }
    };
}

/// The bindings of a world that reads the store, the `Component` its
/// exports are implemented on, and the conversions between the SDK's plain
/// types and the generated WIT types; shared by both macros.
#[doc(hidden)]
#[macro_export]
macro_rules! __esr_wit_conversions {
    ($world:literal) => {
        $crate::__esr_bindings!($world);
        $crate::__esr_panic_log!();

        /// The component the export macro implements the world's exports on.
        struct Component;

        /// The host's store; `holds`: records may be held for the page
        /// (`held-lists.list` of a plugin whose pages are stored records
        /// only: `handler.list` answers bytes).
        struct WasmStore {
            holds: bool,
        }

        const READING: WasmStore = WasmStore { holds: false };

        fn position_to_wit(position: &$crate::IndexPosition) -> esr::plugin::store::IndexPosition {
            esr::plugin::store::IndexPosition { created_at: position.position, id: position.id.to_string() }
        }

        fn position_from_wit(position: esr::plugin::store::IndexPosition) -> $crate::IndexPosition {
            // The host hands out the ids of stored records, always UUIDs.
            $crate::IndexPosition::new(position.created_at, $crate::Uuid::parse_str(&position.id).unwrap_or_default())
        }

        /// Where a walk starts and how far it goes, as the WIT takes them.
        fn walk_to_wit(
            after: Option<$crate::IndexPosition>,
            limit: usize,
        ) -> (Option<esr::plugin::store::IndexPosition>, u32) {
            (after.as_ref().map(position_to_wit), u32::try_from(limit).unwrap_or(u32::MAX))
        }

        fn range_to_wit(range: &$crate::IndexRange) -> esr::plugin::store::IndexRange {
            esr::plugin::store::IndexRange {
                index: range.index.clone(),
                after: range.after.as_ref().map(position_to_wit),
                before: range.before.as_ref().map(position_to_wit),
            }
        }

        fn conditions_to_wit(conditions: &[$crate::IndexCondition]) -> Vec<esr::plugin::store::IndexCondition> {
            conditions
                .iter()
                .map(|c| esr::plugin::store::IndexCondition { index: c.index.clone(), values: c.values.clone() })
                .collect()
        }

        fn entries_from_wit(entries: Vec<esr::plugin::store::Entry>) -> Vec<$crate::Entry> {
            entries.into_iter().map(|e| $crate::Entry { id: e.id, value: e.value.into(), position: None }).collect()
        }

        impl $crate::Store for WasmStore {
            fn get(&self, collection: &str, id: &str) -> Option<Vec<u8>> {
                esr::plugin::store::get(collection, id)
            }
            fn scan(&self, collection: &str, walk: &$crate::RecordWalk) -> Vec<$crate::Entry> {
                let after = walk.after.map(|id| id.to_string());
                let limit = u32::try_from(walk.limit).unwrap_or(u32::MAX);
                entries_from_wit(esr::plugin::store::scan(collection, after.as_deref(), limit, walk.reverse))
            }
            fn count(&self, collection: &str) -> u64 {
                esr::plugin::store::count(collection)
            }
            fn index_scan(&self, collection: &str, walk: &$crate::IndexWalk<'_>) -> Vec<$crate::Entry> {
                let (after, limit) = walk_to_wit(walk.after, walk.limit);
                let (index, value) = (walk.index, walk.value);
                let batch =
                    esr::plugin::store::index_scan_batch(collection, index, value, after.as_ref(), limit, walk.reverse);
                $crate::Entry::from_batch(&batch.ids, &batch.positions, &batch.ends, batch.values)
            }
            fn index_positions(&self, collection: &str, walk: &$crate::IndexWalk<'_>) -> Vec<$crate::IndexPosition> {
                let (after, limit) = walk_to_wit(walk.after, walk.limit);
                let (index, value) = (walk.index, walk.value);
                esr::plugin::store::index_positions(collection, index, value, after.as_ref(), limit, walk.reverse)
                    .into_iter()
                    .map(position_from_wit)
                    .collect()
            }
            fn index_count(&self, collection: &str, index: &str, value: &str) -> u64 {
                esr::plugin::store::index_count(collection, index, value)
            }
            fn count_matching(&self, collection: &str, matching: &$crate::Matching) -> u64 {
                let conditions = conditions_to_wit(&matching.conditions);
                if matching.ranges.is_empty() {
                    return esr::plugin::store::count_matching(collection, &conditions, matching.updated_after);
                }
                let ranges: Vec<_> = matching.ranges.iter().map(range_to_wit).collect();
                esr::plugin::store::count_in_ranges(collection, &ranges, &conditions, matching.updated_after)
            }
            fn count_groups(
                &self,
                collection: &str,
                group_by: &[String],
                matching: &$crate::Matching,
            ) -> Vec<$crate::GroupCount> {
                let ranges: Vec<_> = matching.ranges.iter().map(range_to_wit).collect();
                let conditions = conditions_to_wit(&matching.conditions);
                esr::plugin::store::count_groups_in_ranges(
                    collection,
                    group_by,
                    &ranges,
                    &conditions,
                    matching.updated_after,
                )
                .into_iter()
                .map(|group| $crate::GroupCount { values: group.values, count: group.count })
                .collect()
            }
            fn organization(&self) -> Vec<u8> {
                esr::plugin::store::organization()
            }
            fn index_scan_held(&self, collection: &str, walk: &$crate::IndexWalk<'_>) -> Option<Vec<$crate::Held>> {
                if !self.holds {
                    return None;
                }
                let (after, limit) = walk_to_wit(walk.after, walk.limit);
                let (index, value) = (walk.index, walk.value);
                let batch =
                    esr::plugin::store::index_scan_held(collection, index, value, after.as_ref(), limit, walk.reverse);
                Some($crate::Held::from_batch(batch.first, &batch.ids, &batch.positions))
            }
        }

        fn to_request(request: esr::plugin::types::Request) -> $crate::Request {
            $crate::Request {
                query: request.query.into_iter().map(|p| $crate::QueryParam { name: p.name, value: p.value }).collect(),
                path: request.path,
                base_url: request.base_url,
            }
        }

        fn to_error(error: $crate::PluginError) -> esr::plugin::types::Error {
            use esr::plugin::types::{Error, InvalidParam};
            match error {
                $crate::PluginError::InvalidParameters(list) => Error::InvalidParameters(
                    list.into_iter().map(|p| InvalidParam { name: p.name, reason: p.reason }).collect(),
                ),
                $crate::PluginError::NotFound => Error::NotFound,
                $crate::PluginError::Internal(message) => Error::Internal(message),
            }
        }

        fn to_descriptor(descriptor: $crate::Descriptor) -> esr::plugin::types::Descriptor {
            esr::plugin::types::Descriptor {
                group: descriptor.group,
                version: descriptor.version,
                parameters: descriptor
                    .parameters
                    .into_iter()
                    .map(|p| esr::plugin::types::ParameterInfo {
                        name: p.name,
                        description: p.description,
                        schema: p.schema,
                        required: p.required,
                    })
                    .collect(),
                sort_keys: descriptor.sort_keys,
                response_schema: descriptor.response_schema,
                reads: descriptor.reads,
            }
        }
    };
}

/// Exports a [`ResourcePlugin`](crate::ResourcePlugin) as a component of the
/// `resource-plugin` world.
#[macro_export]
macro_rules! export_resource_plugin {
    ($plugin:ty) => {
        #[cfg(target_arch = "wasm32")]
        mod esr_component {

            $crate::__esr_wit_conversions!("esr:plugin/resource-plugin");

            use exports::esr::plugin::handler::{Guest, Page};
            use $crate::ResourcePlugin as _;

            impl Guest for Component {
                fn describe() -> esr::plugin::types::Descriptor {
                    report_panics();
                    to_descriptor(<$plugin>::describe())
                }

                fn list(request: esr::plugin::types::Request) -> Result<Page, esr::plugin::types::Error> {
                    report_panics();
                    <$plugin>::list(&READING, &to_request(request))
                        .map(|page| Page {
                            data: page.data,
                            total: page.total,
                            limit: page.limit,
                            offset: page.offset,
                            next_cursor: page.next_cursor,
                        })
                        .map_err(to_error)
                }

                fn get(id: String, request: esr::plugin::types::Request) -> Result<Vec<u8>, esr::plugin::types::Error> {
                    report_panics();
                    <$plugin>::get(&READING, &id, &to_request(request)).map_err(to_error)
                }
            }

            impl exports::esr::plugin::held_lists::Guest for Component {
                fn list(
                    request: esr::plugin::types::Request,
                ) -> Result<exports::esr::plugin::held_lists::HeldPage, esr::plugin::types::Error> {
                    use exports::esr::plugin::held_lists::{HeldPage, PageRecords};
                    report_panics();
                    let store = WasmStore { holds: <$plugin>::PAGES_ARE_STORED_RECORDS };
                    <$plugin>::list(&store, &to_request(request))
                        .map(|page| HeldPage {
                            records: match page.held {
                                Some(numbers) => PageRecords::Held(numbers),
                                None => PageRecords::Json(page.data),
                            },
                            total: page.total,
                            limit: page.limit,
                            offset: page.offset,
                            next_cursor: page.next_cursor,
                        })
                        .map_err(to_error)
                }
            }

            impl exports::esr::plugin::summaries::Guest for Component {
                fn describe_summary() -> exports::esr::plugin::summaries::SummaryInfo {
                    report_panics();
                    let info = <$plugin>::describe_summary();
                    exports::esr::plugin::summaries::SummaryInfo {
                        group_by: info.group_by,
                        parameters: info
                            .parameters
                            .into_iter()
                            .map(|p| esr::plugin::types::ParameterInfo {
                                name: p.name,
                                description: p.description,
                                schema: p.schema,
                                required: p.required,
                            })
                            .collect(),
                    }
                }

                fn summary(
                    request: esr::plugin::types::Request,
                ) -> Result<exports::esr::plugin::summaries::SummaryAnswer, esr::plugin::types::Error> {
                    report_panics();
                    <$plugin>::summary(&READING, &to_request(request))
                        .map(|summary| exports::esr::plugin::summaries::SummaryAnswer {
                            groups: summary.groups,
                            total: summary.total,
                        })
                        .map_err(to_error)
                }
            }

            impl exports::esr::plugin::bulk_export::Guest for Component {
                fn export_formats() -> Vec<String> {
                    report_panics();
                    <$plugin>::export_formats()
                }

                fn export_chunk(
                    request: esr::plugin::types::Request,
                    after: Option<String>,
                    max_records: u32,
                    max_bytes: u32,
                ) -> Result<exports::esr::plugin::bulk_export::Chunk, esr::plugin::types::Error> {
                    report_panics();
                    <$plugin>::export_chunk(&READING, &to_request(request), after.as_deref(), max_records, max_bytes)
                        .map(|chunk| exports::esr::plugin::bulk_export::Chunk {
                            lines: chunk.lines,
                            count: chunk.count,
                            last_read: chunk.last_read,
                        })
                        .map_err(to_error)
                }
            }

            export!(Component);
        }
    };
}

/// Exports a [`DocumentPlugin`](crate::DocumentPlugin) as a component of the
/// `document-plugin` world.
#[macro_export]
macro_rules! export_document_plugin {
    ($plugin:ty) => {
        #[cfg(target_arch = "wasm32")]
        mod esr_component {

            $crate::__esr_wit_conversions!("esr:plugin/document-plugin");

            use exports::esr::plugin::document::{Guest, Rendered};
            use $crate::DocumentPlugin as _;

            impl Guest for Component {
                fn describe() -> esr::plugin::types::Descriptor {
                    report_panics();
                    to_descriptor(<$plugin>::describe())
                }

                fn render(request: esr::plugin::types::Request) -> Result<Rendered, esr::plugin::types::Error> {
                    report_panics();
                    <$plugin>::render(&READING, &to_request(request))
                        .map(|doc| Rendered { content_type: doc.content_type, filename: doc.filename, body: doc.body })
                        .map_err(to_error)
                }
            }

            export!(Component);
        }
    };
}

/// Exports a [`ReportImporter`](crate::report::ReportImporter) as a
/// component of the `report-importer` world: `convert` answers the
/// [`ConvertedReport`](crate::report::ConvertedReport) as JSON.
#[macro_export]
macro_rules! export_report_importer {
    ($importer:ty) => {
        #[cfg(target_arch = "wasm32")]
        mod esr_component {
            $crate::__esr_bindings!("esr:plugin/report-importer");
            $crate::__esr_panic_log!();

            use exports::esr::plugin::importer::{Confidence, Guest, ImporterInfo, MalformedJson, ReportError};
            use $crate::report::ReportImporter as _;

            struct Component;

            impl Guest for Component {
                fn describe() -> ImporterInfo {
                    report_panics();
                    let info = <$importer>::describe();
                    ImporterInfo { format: info.format, version: info.version, description: info.description }
                }

                fn detect(report: Vec<u8>) -> Confidence {
                    report_panics();
                    match <$importer>::detect(&report) {
                        $crate::report::Confidence::No => Confidence::No,
                        $crate::report::Confidence::Possible => Confidence::Possible,
                        $crate::report::Confidence::Certain => Confidence::Certain,
                    }
                }

                fn convert(report: Vec<u8>) -> Result<Vec<u8>, ReportError> {
                    report_panics();
                    let converted = <$importer>::convert(&report).map_err(|error| match error {
                        $crate::report::ReportError::Malformed { line, column, reason } => {
                            ReportError::Malformed(MalformedJson { line, column, reason })
                        }
                        $crate::report::ReportError::Unsupported(reason) => ReportError::Unsupported(reason),
                        $crate::report::ReportError::Invalid(reason) => ReportError::Invalid(reason),
                    })?;
                    // The report is dropped before the answer is written, so
                    // peak memory holds one of them plus the answer.
                    drop(report);
                    serde_json::to_vec(&converted).map_err(|error| {
                        ReportError::Invalid(format!("the converted report cannot be written: {error}"))
                    })
                }
            }

            export!(Component);
        }
    };
}
