//! The desired state: the last good version of every config file, and the difference each
//! re-read makes to it.
//!
//! This is where "a broken file never disturbs anything" is decided: a file that fails keeps
//! its last good version in force (or stays absent if it never was good) and is listed in
//! [`ConfigState::problems`]; only a file that is really gone from the folder removes what it
//! described.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::files::{ComponentFiles, FolderScan, Folders, add_clusters, add_manifests, scan};
use super::folder_watch::WatchedDir;
use super::inventory::InventorySnapshot;
use super::main_file::MainConfig;
use super::read_once;
use super::sources::{ClusterSource, PluginSource};
use super::{ConfigError, MAIN_FILE};

/// A change to one named item.
#[derive(Debug, Clone)]
pub enum Change<T> {
    Added(T),
    Changed(T),
    Removed(String),
}

/// What one re-read changed.
#[derive(Debug, Default)]
pub struct Update {
    /// The main file changed in a way that needs every cluster's watchers restarted.
    pub watch_changed: bool,
    pub clusters: Vec<Change<ClusterSource>>,
    pub plugins: Vec<Change<PluginSource>>,
}

impl Update {
    pub fn is_empty(&self) -> bool {
        !self.watch_changed && self.clusters.is_empty() && self.plugins.is_empty()
    }
}

/// The config folder's last good state.
#[derive(Debug)]
pub struct ConfigState {
    root: PathBuf,
    /// Where the clusters' kubeconfigs are read from: the main file's `clusters_dir` at start.
    clusters_dir: PathBuf,
    /// Where the plugins' manifests are read from: the main file's `plugin_manifests_dir` at
    /// start.
    manifests_dir: PathBuf,
    main: Arc<MainConfig>,
    /// The main file the daemon started with: sections it reads once are compared with it.
    started: Arc<MainConfig>,
    /// Sections read once at start that the main file changed since (see
    /// [`MainConfig::read_once_changes`]).
    restart_pending: Vec<&'static str>,
    main_sha256: Option<String>,
    clusters: BTreeMap<String, ClusterSource>,
    /// The cluster files of the last scan by name (refused ones too): a name a file takes is
    /// never a source's.
    cluster_files: BTreeMap<String, PathBuf>,
    /// What each cluster source on the home cluster last said (`cluster_sources:`), by source.
    inventories: BTreeMap<String, InventorySnapshot>,
    /// The names in `clusters` that come from a source rather than a file.
    from_sources: std::collections::BTreeSet<String>,
    /// Cluster name → the source and the Secret (`namespace/name`) it runs from.
    given_by: BTreeMap<String, (String, String)>,
    /// Objects of each source refused (`namespace/name` → why), name conflicts included.
    source_refused: BTreeMap<String, BTreeMap<String, String>>,
    plugins: BTreeMap<String, PluginSource>,
    problems: BTreeMap<PathBuf, String>,
    components: ComponentFiles,
}

impl ConfigState {
    /// First read. Only a broken main file is fatal: without it nothing can be judged. A
    /// missing main file means the defaults.
    pub fn load(root: &Path) -> Result<(ConfigState, Update), (PathBuf, ConfigError)> {
        let root = std::path::absolute(root).unwrap_or_else(|_| root.to_path_buf());
        if !root.is_dir() {
            return Err((
                root,
                ConfigError::Read("the config folder does not exist or is not a folder".into()),
            ));
        }
        let mut folder = scan(&root, None);
        if let Some((path, why)) = folder.failed.first() {
            return Err((
                path.clone(),
                ConfigError::Read(format!("cannot read the folder: {why}")),
            ));
        }
        let (main, main_sha256) = match &folder.main {
            None => (
                MainConfig::parse("", &root).map_err(|e| (root.join(MAIN_FILE), e))?,
                None,
            ),
            Some(file) => {
                let content = file
                    .content
                    .as_ref()
                    .map_err(|e| (file.path.clone(), ConfigError::Read(e.to_string())))?;
                let text = content
                    .text()
                    .map_err(|e| (file.path.clone(), ConfigError::Parse(e.to_string())))?;
                let main =
                    MainConfig::parse_file(text, &root).map_err(|e| (file.path.clone(), e))?;
                (main, Some(content.sha256.clone()))
            }
        };
        add_manifests(&mut folder, &main.plugin_manifests_dir);
        add_clusters(&mut folder, &main.clusters_dir);
        if let Some((path, why)) = folder.failed.first() {
            return Err((
                path.clone(),
                ConfigError::Read(format!("cannot read the folder: {why}")),
            ));
        }
        let clusters_dir = main.clusters_dir.clone();
        let manifests_dir = main.plugin_manifests_dir.clone();
        let main = Arc::new(main);
        let mut state = ConfigState {
            clusters_dir,
            manifests_dir,
            root,
            started: main.clone(),
            restart_pending: Vec::new(),
            main,
            main_sha256,
            clusters: BTreeMap::new(),
            cluster_files: BTreeMap::new(),
            inventories: BTreeMap::new(),
            from_sources: Default::default(),
            given_by: BTreeMap::new(),
            source_refused: BTreeMap::new(),
            plugins: BTreeMap::new(),
            problems: BTreeMap::new(),
            components: ComponentFiles::default(),
        };
        let update = state.apply(folder);
        Ok((state, update))
    }

    /// Re-read the folder and return what changed.
    pub fn refresh(&mut self) -> Update {
        let folder = scan(
            &self.root,
            Some(Folders {
                clusters: &self.clusters_dir,
                manifests: &self.manifests_dir,
            }),
        );
        self.apply(folder)
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Sections of the main file read once at start that were edited since: they take effect
    /// at the next start.
    pub fn restart_pending(&self) -> &[&'static str] {
        &self.restart_pending
    }

    pub fn main(&self) -> &Arc<MainConfig> {
        &self.main
    }

    pub fn clusters(&self) -> &BTreeMap<String, ClusterSource> {
        &self.clusters
    }

    /// The names of the clusters that come from a cluster source rather than a file.
    pub fn from_sources(&self) -> &std::collections::BTreeSet<String> {
        &self.from_sources
    }

    /// Cluster name → the cluster source and its Secret (`namespace/name`) the cluster runs
    /// from, for each cluster a source gives.
    pub fn given_by(&self) -> &BTreeMap<String, (String, String)> {
        &self.given_by
    }

    /// Objects of each cluster source refused (`namespace/name` → why), by source; an
    /// object's last good cluster, if it had one, still runs.
    pub fn source_refused(&self) -> &BTreeMap<String, BTreeMap<String, String>> {
        &self.source_refused
    }

    /// A cluster source on the home cluster said what it holds now (`None`: the source is no
    /// longer configured): its clusters are added, restarted (only those whose credentials
    /// changed) or removed. A name a file or `home_cluster` takes stays theirs, and the object
    /// is refused naming both.
    pub fn set_inventory(&mut self, source: &str, snapshot: Option<InventorySnapshot>) -> Update {
        match snapshot {
            Some(snapshot) => self.inventories.insert(source.to_string(), snapshot),
            None => self.inventories.remove(source),
        };
        let mut update = Update::default();
        self.merge_inventories(&mut update);
        update
    }

    pub fn plugins(&self) -> &BTreeMap<String, PluginSource> {
        &self.plugins
    }

    /// Files currently refused, with the reason. A refused file's last good version (if any)
    /// is still in force.
    pub fn problems(&self) -> &BTreeMap<PathBuf, String> {
        &self.problems
    }

    /// Folders whose changes matter: the config folder, the plugin, manifest and cluster
    /// folders when they lie outside it, and — only their own entries — the folders of
    /// components named by an absolute `wasm:` path and of the access-provider file outside
    /// all of those.
    pub fn watched_dirs(&self) -> Vec<WatchedDir> {
        let mut dirs = vec![WatchedDir::tree(&self.root)];
        for dir in [
            &self.main.plugin_dir,
            &self.manifests_dir,
            &self.clusters_dir,
        ] {
            if !dir.starts_with(&self.root) {
                dirs.push(WatchedDir::tree(dir));
            }
        }
        let trees: Vec<PathBuf> = dirs.iter().map(|d| d.path.clone()).collect();
        let wasm = self
            .plugins
            .values()
            .filter(|p| p.oci.is_none())
            .map(|p| p.wasm_path.as_path());
        // The access-provider file may sit outside the folder (a mounted Secret): its edit is
        // then noticed at once too.
        let providers = self.main.cluster_sources.cluster_profile.as_ref();
        for file in wasm.chain(providers.map(|p| p.file.as_path())) {
            let Some(folder) = file.parent() else {
                continue;
            };
            let covered = trees.iter().any(|t| folder.starts_with(t));
            if !covered && !dirs.iter().any(|d| d.path == folder) {
                dirs.push(WatchedDir::flat(folder));
            }
        }
        dirs
    }

    fn apply(&mut self, folder: FolderScan) -> Update {
        if !folder.failed.is_empty() {
            // A folder that could not be listed (too many open files, an I/O error) says
            // nothing about what it holds: change nothing, rather than take it as empty and
            // remove every cluster or plugin it described.
            let mut problems = self.problems.clone();
            for (path, why) in &folder.failed {
                tracing::error!(folder = %path.display(), error = %why,
                    "cannot read a config folder; everything stays as it was");
                problems.insert(path.clone(), format!("cannot read the folder: {why}"));
            }
            self.problems = problems;
            return Update::default();
        }
        let mut problems = BTreeMap::new();
        for (path, why) in &folder.conflicts {
            problems.insert(path.clone(), why.clone());
        }
        let mut update = Update::default();
        self.apply_main(&folder, &mut problems, &mut update);
        self.apply_clusters(&folder, &mut problems, &mut update);
        self.apply_plugins(&folder, &mut problems, &mut update);
        self.report(problems);
        update
    }

    fn apply_main(
        &mut self,
        folder: &FolderScan,
        problems: &mut BTreeMap<PathBuf, String>,
        update: &mut Update,
    ) {
        let parsed = match &folder.main {
            // A removed main file means the defaults, like a missing one at start.
            None => MainConfig::parse("", &self.root).map(|m| (m, None)),
            Some(file) => match &file.content {
                Err(e) => Err(ConfigError::Read(e.to_string())),
                // A main file that names a file of its own to read (the access-provider
                // file) is read again at every scan, so an edit of that file alone is
                // followed; unchanged, the parse equals the last and nothing happens.
                Ok(c)
                    if Some(&c.sha256) == self.main_sha256.as_ref()
                        && !self.main.cluster_sources.reads_files() =>
                {
                    return;
                }
                Ok(c) => c
                    .text()
                    .map_err(|e| ConfigError::Parse(e.to_string()))
                    .and_then(|t| MainConfig::parse_file(t, &self.root))
                    .map(|m| (m, Some(c.sha256.clone()))),
            },
        };
        match parsed {
            Ok((main, sha)) => {
                if self.main_sha256 == sha && *self.main == main {
                    return;
                }
                let read_once = self.started.read_once_changes(&main);
                // Every section that differs from what the daemon started with is what the
                // next start will read: one it would refuse refuses the whole edit now, and
                // the last good file stays.
                if let Err(e) = read_once::judge(&main, &read_once) {
                    problems.insert(
                        self.root.join(MAIN_FILE),
                        ConfigError::NextStart(e).to_string(),
                    );
                    return;
                }
                update.watch_changed = self.main.watch_differs(&main);
                if !read_once.is_empty() && read_once != self.restart_pending {
                    tracing::warn!(
                        file = %self.root.join(MAIN_FILE).display(),
                        sections = %read_once.join(", "),
                        "sections read once at start were edited; they take effect at the \
                         next restart, the running daemon keeps the values it started with"
                    );
                }
                self.restart_pending = read_once;
                self.main = Arc::new(main);
                self.main_sha256 = sha;
            }
            Err(e) => {
                problems.insert(self.root.join(MAIN_FILE), e.to_string());
            }
        }
    }

    fn apply_clusters(
        &mut self,
        folder: &FolderScan,
        problems: &mut BTreeMap<PathBuf, String>,
        update: &mut Update,
    ) {
        let home = self.main.home_cluster.as_ref();
        let gone: Vec<String> = self
            .clusters
            .keys()
            .filter(|n| {
                !folder.clusters.contains_key(*n)
                    && home.is_none_or(|h| h.name != **n)
                    && !self.from_sources.contains(*n)
            })
            .cloned()
            .collect();
        self.cluster_files = folder
            .clusters
            .iter()
            .map(|(name, file)| (name.clone(), file.path.clone()))
            .collect();
        for name in gone {
            self.clusters.remove(&name);
            update.clusters.push(Change::Removed(name));
        }
        if let Some(home) = home {
            match home.source() {
                Ok(source) => {
                    let known = self.clusters.get(&source.name);
                    if known.is_none_or(|k| k.sha256 != source.sha256) {
                        let change = if known.is_some() {
                            Change::Changed(source.clone())
                        } else {
                            Change::Added(source.clone())
                        };
                        self.from_sources.remove(&source.name);
                        self.clusters.insert(source.name.clone(), source);
                        update.clusters.push(change);
                    }
                }
                // The last good source (if any) keeps running.
                Err(e) => {
                    problems.insert(self.root.join(MAIN_FILE), e.to_string());
                }
            }
        }
        for (name, file) in &folder.clusters {
            if home.is_some_and(|h| h.name == *name) {
                problems.insert(
                    file.path.clone(),
                    format!("the cluster name `{name}` is taken by `home_cluster`"),
                );
                continue;
            }
            let known = self.clusters.get(name);
            let unchanged = match (known, &file.content) {
                (Some(k), Ok(c)) => k.sha256 == c.sha256,
                _ => false,
            };
            if unchanged {
                continue;
            }
            match ClusterSource::parse(name, file) {
                Ok(source) => {
                    let change = if known.is_some() {
                        Change::Changed(source.clone())
                    } else {
                        Change::Added(source.clone())
                    };
                    self.from_sources.remove(name);
                    self.clusters.insert(name.clone(), source);
                    update.clusters.push(change);
                }
                Err(e) => {
                    problems.insert(file.path.clone(), e.to_string());
                }
            }
        }
        self.merge_inventories(update);
    }

    /// Makes the clusters of the sources what their snapshots say, under the names no file
    /// and no `home_cluster` takes.
    fn merge_inventories(&mut self, update: &mut Update) {
        let home = self.main.home_cluster.as_ref().map(|h| h.name.as_str());
        let mut wanted: BTreeMap<String, ClusterSource> = BTreeMap::new();
        // Cluster name → the source and Secret that give it, to name both in a conflict.
        let mut given_by: BTreeMap<String, (String, String)> = BTreeMap::new();
        let mut refused: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
        for (source_name, snapshot) in &self.inventories {
            let out = refused.entry(source_name.clone()).or_default();
            out.extend(snapshot.refused.clone());
            for (name, (key, cluster)) in &snapshot.clusters {
                let taken = if let Some(path) = self.cluster_files.get(name) {
                    Some(format!(
                        "the cluster name `{name}` is also the file {} (the file's cluster \
                         runs; rename one of them)",
                        path.display()
                    ))
                } else if home == Some(name.as_str()) {
                    Some(format!(
                        "the cluster name `{name}` is taken by `home_cluster`"
                    ))
                } else if let Some((other, secret)) = given_by.get(name) {
                    Some(format!(
                        "the cluster name `{name}` is already given by {} {secret} of the \
                         cluster source {other} (its cluster runs; rename one of them)",
                        super::sections::cluster_sources::object_of(other)
                    ))
                } else {
                    None
                };
                match taken {
                    Some(why) => {
                        out.insert(key.clone(), why);
                    }
                    None => {
                        wanted.insert(name.clone(), cluster.clone());
                        given_by.insert(name.clone(), (source_name.clone(), key.clone()));
                    }
                }
            }
        }
        let gone: Vec<String> = self
            .from_sources
            .iter()
            .filter(|n| !wanted.contains_key(*n))
            .cloned()
            .collect();
        for name in gone {
            self.from_sources.remove(&name);
            self.clusters.remove(&name);
            update.clusters.push(Change::Removed(name));
        }
        for (name, cluster) in wanted {
            let known = self.clusters.get(&name);
            if known.is_some_and(|k| k.sha256 == cluster.sha256) {
                continue;
            }
            let change = if known.is_some() {
                Change::Changed(cluster.clone())
            } else {
                Change::Added(cluster.clone())
            };
            self.from_sources.insert(name.clone());
            self.clusters.insert(name, cluster);
            update.clusters.push(change);
        }
        for (source, objects) in &refused {
            let before = self.source_refused.get(source);
            for (key, why) in objects {
                if before.and_then(|b| b.get(key)) != Some(why) {
                    tracing::error!(source = %source, secret = %key, reason = %why,
                        "cluster source object refused; the cluster's last good credentials, \
                         if any, stay in force");
                }
            }
            for key in before.into_iter().flat_map(|b| b.keys()) {
                if !objects.contains_key(key) {
                    tracing::info!(source = %source, secret = %key,
                        "cluster source object accepted again, or gone");
                }
            }
        }
        refused.retain(|_, objects| !objects.is_empty());
        self.source_refused = refused;
        self.given_by = given_by;
    }

    fn apply_plugins(
        &mut self,
        folder: &FolderScan,
        problems: &mut BTreeMap<PathBuf, String>,
        update: &mut Update,
    ) {
        let gone: Vec<String> = self
            .plugins
            .keys()
            .filter(|n| !folder.manifests.contains_key(*n))
            .cloned()
            .collect();
        for name in gone {
            self.plugins.remove(&name);
            update.plugins.push(Change::Removed(name));
        }
        for (name, file) in &folder.manifests {
            match PluginSource::parse(name, file, &self.main, &self.root, &mut self.components) {
                Ok(source) => {
                    let change = match self.plugins.get(name) {
                        Some(known) if known.spec.version == source.spec.version => continue,
                        Some(_) => Change::Changed(source.clone()),
                        None => Change::Added(source.clone()),
                    };
                    self.plugins.insert(name.clone(), source);
                    update.plugins.push(change);
                }
                Err(e) => {
                    problems.insert(file.path.clone(), e.to_string());
                }
            }
        }
        let named: std::collections::HashSet<&Path> = self
            .plugins
            .values()
            .map(|p| p.wasm_path.as_path())
            .collect();
        self.components.retain(&named);
    }

    /// Log problems that appeared or changed, and files that recovered.
    fn report(&mut self, problems: BTreeMap<PathBuf, String>) {
        for (path, why) in &problems {
            if self.problems.get(path) != Some(why) {
                tracing::error!(file = %path.display(), reason = %why,
                    "config file refused; its last good version stays in force");
            }
        }
        for path in self.problems.keys() {
            if !problems.contains_key(path) {
                tracing::info!(file = %path.display(), "config file accepted again");
            }
        }
        self.problems = problems;
    }
}
