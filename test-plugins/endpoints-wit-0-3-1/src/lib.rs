//! An endpoints component built against `esr:plugin@0.3.1` (the WIT kept in
//! this crate's `wit/`), as a deployment may still run one after the host
//! moved on to 0.3.2: it exports `handler` only, no `summaries`. It lists
//! the first page of endpoints in id order, with the common list
//! parameters refused but `limit`, and reads records by id.

// The export glue wit-bindgen writes is `unsafe` (the component ABI); the
// stock components get it through the SDK's macros instead.
#[cfg(target_arch = "wasm32")]
#[allow(unsafe_code)]
mod component {
    wit_bindgen::generate!({ path: "wit", world: "esr:plugin/resource-plugin" });

    use esr::plugin::store;
    use esr::plugin::types::{Descriptor, Error, InvalidParam, Request};
    use exports::esr::plugin::handler::{Guest, Page};

    const COLLECTION: &str = "endpoints";

    struct Component;

    fn invalid(name: &str, reason: &str) -> Error {
        Error::InvalidParameters(vec![InvalidParam { name: name.to_owned(), reason: reason.to_owned() }])
    }

    impl Guest for Component {
        fn describe() -> Descriptor {
            Descriptor {
                group: COLLECTION.to_owned(),
                version: concat!(env!("CARGO_PKG_VERSION"), "+wit-0.3.1").to_owned(),
                parameters: Vec::new(),
                sort_keys: vec!["created_at".to_owned()],
                response_schema: "{}".to_owned(),
                reads: vec![COLLECTION.to_owned()],
            }
        }

        fn list(request: Request) -> Result<Page, Error> {
            if let Some(param) = request.query.first() {
                return Err(invalid(&param.name, "unknown parameter"));
            }
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
            if let Some(param) = request.query.first() {
                return Err(invalid(&param.name, "unknown parameter"));
            }
            store::get(COLLECTION, &id).ok_or(Error::NotFound)
        }
    }

    export!(Component);
}
