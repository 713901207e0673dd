//! A vulnerability-findings component built against `esr:plugin@0.3.2`
//! (the WIT kept in this crate's `wit/`), as a deployment may still run one
//! after the host moved on to 0.3.3: it exports `handler` and `summaries`,
//! no `bulk-export`, and renders no format. It lists the first page of
//! findings in id order and reads records by id, refusing any parameter
//! but `limit`.

// The export glue wit-bindgen writes is `unsafe` (the component ABI); the
// stock components get it through the SDK's macros instead.
#[cfg(target_arch = "wasm32")]
#[allow(unsafe_code)]
mod component {
    wit_bindgen::generate!({ path: "wit", world: "esr:plugin/resource-plugin" });

    use esr::plugin::store;
    use esr::plugin::types::{Descriptor, Error, InvalidParam, Request};
    use exports::esr::plugin::handler::{Guest, Page};
    use exports::esr::plugin::summaries::{Guest as Summaries, SummaryAnswer, SummaryInfo};

    const COLLECTION: &str = "vulnerability-findings";

    struct Component;

    fn refuse_any(request: &Request) -> Result<(), Error> {
        match request.query.first() {
            Some(param) => Err(Error::InvalidParameters(vec![InvalidParam {
                name: param.name.clone(),
                reason: "unknown parameter".to_owned(),
            }])),
            None => Ok(()),
        }
    }

    impl Guest for Component {
        fn describe() -> Descriptor {
            Descriptor {
                group: COLLECTION.to_owned(),
                version: concat!(env!("CARGO_PKG_VERSION"), "+wit-0.3.2").to_owned(),
                parameters: Vec::new(),
                sort_keys: vec!["created_at".to_owned()],
                response_schema: "{}".to_owned(),
                reads: vec![COLLECTION.to_owned()],
            }
        }

        fn list(request: Request) -> Result<Page, Error> {
            refuse_any(&request)?;
            let records = store::scan(COLLECTION, None, 50, false);
            let mut data = b"[".to_vec();
            for (position, record) in records.iter().enumerate() {
                if position > 0 {
                    data.push(b',');
                }
                data.extend_from_slice(&record.value);
            }
            data.push(b']');
            Ok(Page { data, total: store::count(COLLECTION), limit: 50, offset: Some(0), next_cursor: None })
        }

        fn get(id: String, request: Request) -> Result<Vec<u8>, Error> {
            refuse_any(&request)?;
            store::get(COLLECTION, &id).ok_or(Error::NotFound)
        }
    }

    impl Summaries for Component {
        fn describe_summary() -> SummaryInfo {
            SummaryInfo { group_by: Vec::new(), parameters: Vec::new() }
        }

        fn summary(_request: Request) -> Result<SummaryAnswer, Error> {
            Err(Error::NotFound)
        }
    }

    export!(Component);
}
