//! wasmtime's own cost of a fresh instance per call, in the host's pool:
//! the floor under the boundary loop's figures. Components made here, as
//! small as a component can be, beside the stock findings component.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Context;
use esr_runtime::{ComponentEngine, Limits};
use wasm_encoder::{
    CodeSection, EntityType, ExportKind, ExportSection, Function, FunctionSection, ImportSection, MemorySection,
    MemoryType, Module, TypeSection, ValType,
};

use crate::stats::median;

const CALLS_PER_BLOCK: usize = 5_000;

/// The floor's lines for the boundary report: µs a fresh instance, medians
/// of `rounds` blocks, the cases alternating block by block.
pub(crate) fn instance_floor(plugins_dir: &Path, rounds: usize) -> anyhow::Result<String> {
    let findings = plugins_dir.join("vulnerability-findings.wasm");
    let cases = [
        ("no import, `run` called", bare_component(0)?),
        ("one import that needs its memory, `run` called", bare_component(1)?),
        ("twelve such imports, `run` called", bare_component(12)?),
        (
            "the findings component, made and dropped",
            std::fs::read(&findings).with_context(|| format!("reading {}", findings.display()))?,
        ),
    ];
    let engine = ComponentEngine::new(Limits::default())?;
    let ready = cases.iter().map(|(_, bytes)| engine.bare_component(bytes)).collect::<anyhow::Result<Vec<_>>>()?;
    let mut blocks = vec![Vec::new(); cases.len()];
    for _ in 0..rounds {
        for (component, times) in ready.iter().zip(&mut blocks) {
            let elapsed = component.time(CALLS_PER_BLOCK)?;
            times.push(elapsed.as_secs_f64() * 1e6 / CALLS_PER_BLOCK as f64);
        }
    }
    let mut report = format!(
        "\nwasmtime's floor: a fresh instance of a component made for it, in the same pool ({CALLS_PER_BLOCK} a \
         block, medians; an import taking a string and returning a list makes wit-component add its shim and \
         fix-up modules)\n"
    );
    for ((name, _), times) in cases.iter().zip(blocks) {
        writeln!(report, "{name:<58} {:>10.2}", median(times))?;
    }
    Ok(report)
}

/// A component of one core module with `imports` functions of the form
/// `func(s: string) -> list<u8>` and one export, `run: func() -> u32`.
fn bare_component(imports: u32) -> anyhow::Result<Vec<u8>> {
    const RUN: u32 = 0;
    const REALLOC: u32 = 1;
    const LOWERED: u32 = 2;
    let mut module = Module::new();
    let mut types = TypeSection::new();
    types.ty().function([], [ValType::I32]);
    types.ty().function([ValType::I32; 4], [ValType::I32]);
    // A string in (pointer, length) and the list's place out (pointer).
    types.ty().function([ValType::I32; 3], []);
    module.section(&types);
    let mut import_section = ImportSection::new();
    for index in 0..imports {
        import_section.import("test:floor/store", &format!("read{index}"), EntityType::Function(LOWERED));
    }
    module.section(&import_section);
    let mut functions = FunctionSection::new();
    functions.function(RUN);
    functions.function(REALLOC);
    module.section(&functions);
    let mut memories = MemorySection::new();
    memories.memory(MemoryType { minimum: 17, maximum: None, memory64: false, shared: false, page_size_log2: None });
    module.section(&memories);
    let mut exports = ExportSection::new();
    exports.export("memory", ExportKind::Memory, 0);
    exports.export("run", ExportKind::Func, imports + RUN);
    exports.export("cabi_realloc", ExportKind::Func, imports + REALLOC);
    module.section(&exports);
    let mut code = CodeSection::new();
    for value in [42, 1024] {
        let mut body = Function::new([]);
        body.instructions().i32_const(value).end();
        code.function(&body);
    }
    module.section(&code);
    let mut bytes = module.finish();

    let reads: String = (0..imports).map(|index| format!("read{index}: func(s: string) -> list<u8>;\n")).collect();
    let wit = format!(
        "package test:floor;\ninterface store {{\n{reads}}}\nworld floor {{\nimport store;\nexport run: func() -> u32;\n}}\n"
    );
    let mut resolve = wit_parser::Resolve::default();
    let package = resolve.push_str("floor.wit", &wit)?;
    let world = resolve.select_world(&[package], Some("floor"))?;
    wit_component::embed_component_metadata(&mut bytes, &resolve, world, wit_component::StringEncoding::UTF8, false)?;
    wit_component::ComponentEncoder::default().module(&bytes)?.validate(true).encode()
}
