//! The `plugin` world of `jobrelay:plugin@0.2.0` (`wit/0.2.0/plugin.wit`), still served so
//! plugins built before 0.2.1 keep running.
//!
//! 0.2.1 only added the `fleet` interface and the `handle-fleet` export. Unlike 0.1.0 (see
//! [`super::v0_1`]), nothing of a 0.2.0 plugin's imports needs forwarding: the component linker
//! resolves an import of `jobrelay:plugin/log@0.2.0` to the instance defined as
//! `jobrelay:plugin/log@0.2.1`, since semver-compatible versions (the same `0.2` track) stand
//! for one another, so the capabilities linked for the current world serve these plugins as
//! they are. What differs is the set of exports, so this world is bound only for them: every
//! interface of the package is mapped (`with`) onto the current bindings, which makes
//! `job-event` and `handler-error` the very same Rust types (0.2.0's `job-event` is
//! field-for-field 0.2.1's), and what is generated here is the world's `Plugin`/`PluginPre`
//! with `init` and `handle`.

wasmtime::component::bindgen!({
    world: "plugin",
    path: "../../wit/0.2.0/plugin.wit",
    imports: { default: async },
    exports: { default: async },
    ownership: Borrowing { duplicate_if_necessary: true },
    with: {
        "jobrelay:plugin": super::jobrelay::plugin,
    },
});
