//! A plain `wasm32-wasip2` program. It is a valid component, but it exports `wasi:cli/run`
//! instead of the `plugin` world's `init` and `handle`, so the host must refuse to load it.

fn main() {
    println!("I am a command, not a jobrelay plugin");
}
