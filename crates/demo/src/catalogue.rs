//! Real-world reference data behind the demo generator: operating system
//! releases, installable software, CVEs with their CVSS 3.1 vectors and CISA
//! KEV status, non-CVE checks, the organization's standing scopes, and the
//! names used for people, applications and tags.
//!
//! CVE ids, titles, vectors and KEV membership are real. Product versions are
//! real release numbers; distro package revisions and Windows/Office build
//! numbers of fixes are representative of the actual advisories rather than
//! authoritative. EPSS scores are plausible, not a snapshot of the feed.

use super::{Family, Severity};

// ---------------------------------------------------------------------------
// Endpoint roles and operating systems
// ---------------------------------------------------------------------------

/// What an endpoint is used for; drives OS, software, tags and naming.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    MacLaptop,
    WindowsWorkstation,
    WindowsServer,
    LinuxServer,
    LinuxWorkstation,
}

impl Role {
    pub fn is_server(self) -> bool {
        matches!(self, Role::WindowsServer | Role::LinuxServer)
    }
}

/// macOS 30%, Windows 45%, Linux 25%. The weights add up to 100: they are
/// dealt as a shuffled deck, so every 100 endpoints have exactly this mix.
pub const ROLE_WEIGHTS: &[(Role, u32)] = &[
    (Role::MacLaptop, 30),
    (Role::WindowsWorkstation, 34),
    (Role::WindowsServer, 11),
    (Role::LinuxServer, 21),
    (Role::LinuxWorkstation, 4),
];

/// How macOS and Windows are patched: as a whole, so the OS itself is the
/// subject of OS-level CVEs (Linux is patched package by package instead).
pub struct OsProduct {
    /// Product key OS-level CVEs refer to.
    pub key: &'static str,
    /// Subject product name on findings and targets.
    pub subject: &'static str,
    /// CPE template (`{version}`, `{cpe_arch}`).
    pub cpe: &'static str,
}

pub struct OsRelease {
    /// Stream key: CVE fixes and distro packages are per release.
    pub key: &'static str,
    pub family: Family,
    pub name: &'static str,
    pub vendor: &'static str,
    /// Versions (builds) seen in the fleet, oldest first.
    pub versions: &'static [&'static str],
    pub roles: &'static [Role],
    pub weight: u32,
    pub arm64_percent: u32,
    pub os_product: Option<OsProduct>,
}

const MACOS_CPE: &str = "cpe:2.3:o:apple:macos:{version}:*:*:*:*:*:*:*";

pub const OS_RELEASES: &[OsRelease] = &[
    OsRelease {
        key: "ventura",
        family: Family::MacOs,
        name: "macOS Ventura",
        vendor: "Apple",
        versions: &["13.4.1", "13.5.1", "13.6.1", "13.6.3", "13.7.1", "13.7.6"],
        roles: &[Role::MacLaptop],
        weight: 20,
        arm64_percent: 60,
        os_product: Some(OsProduct { key: "macos", subject: "macOS", cpe: MACOS_CPE }),
    },
    OsRelease {
        key: "sonoma",
        family: Family::MacOs,
        name: "macOS Sonoma",
        vendor: "Apple",
        versions: &["14.0", "14.1.1", "14.2.1", "14.6.1", "14.7.1", "14.7.6"],
        roles: &[Role::MacLaptop],
        weight: 45,
        arm64_percent: 85,
        os_product: Some(OsProduct { key: "macos", subject: "macOS", cpe: MACOS_CPE }),
    },
    OsRelease {
        key: "sequoia",
        family: Family::MacOs,
        name: "macOS Sequoia",
        vendor: "Apple",
        versions: &["15.0.1", "15.1", "15.2", "15.3.2", "15.5", "15.7.1"],
        roles: &[Role::MacLaptop],
        weight: 35,
        arm64_percent: 92,
        os_product: Some(OsProduct { key: "macos", subject: "macOS", cpe: MACOS_CPE }),
    },
    OsRelease {
        key: "win11-23h2",
        family: Family::Windows,
        name: "Windows 11 Enterprise",
        vendor: "Microsoft",
        versions: &[
            "10.0.22631.2861",
            "10.0.22631.3296",
            "10.0.22631.3880",
            "10.0.22631.4317",
            "10.0.22631.4890",
            "10.0.22631.5909",
        ],
        roles: &[Role::WindowsWorkstation],
        weight: 40,
        arm64_percent: 4,
        os_product: Some(OsProduct {
            key: "windows",
            subject: "Windows 11 Version 23H2",
            cpe: "cpe:2.3:o:microsoft:windows_11_23h2:{version}:*:*:*:*:*:{cpe_arch}:*",
        }),
    },
    OsRelease {
        key: "win11-22h2",
        family: Family::Windows,
        name: "Windows 11 Enterprise",
        vendor: "Microsoft",
        versions: &["10.0.22621.1413", "10.0.22621.2134", "10.0.22621.2861", "10.0.22621.3447"],
        roles: &[Role::WindowsWorkstation],
        weight: 12,
        arm64_percent: 2,
        os_product: Some(OsProduct {
            key: "windows",
            subject: "Windows 11 Version 22H2",
            cpe: "cpe:2.3:o:microsoft:windows_11_22h2:{version}:*:*:*:*:*:{cpe_arch}:*",
        }),
    },
    OsRelease {
        key: "win11-24h2",
        family: Family::Windows,
        name: "Windows 11 Pro",
        vendor: "Microsoft",
        versions: &["10.0.26100.1742", "10.0.26100.2314", "10.0.26100.3476", "10.0.26100.4061", "10.0.26100.6584"],
        roles: &[Role::WindowsWorkstation],
        weight: 18,
        arm64_percent: 10,
        os_product: Some(OsProduct {
            key: "windows",
            subject: "Windows 11 Version 24H2",
            cpe: "cpe:2.3:o:microsoft:windows_11_24h2:{version}:*:*:*:*:*:{cpe_arch}:*",
        }),
    },
    OsRelease {
        key: "win10-22h2",
        family: Family::Windows,
        name: "Windows 10 Enterprise",
        vendor: "Microsoft",
        versions: &["10.0.19045.2728", "10.0.19045.3803", "10.0.19045.4412", "10.0.19045.5011", "10.0.19045.6216"],
        roles: &[Role::WindowsWorkstation],
        weight: 30,
        arm64_percent: 0,
        os_product: Some(OsProduct {
            key: "windows",
            subject: "Windows 10 Version 22H2",
            cpe: "cpe:2.3:o:microsoft:windows_10_22h2:{version}:*:*:*:*:*:{cpe_arch}:*",
        }),
    },
    OsRelease {
        key: "ws2022",
        family: Family::Windows,
        name: "Windows Server 2022 Datacenter",
        vendor: "Microsoft",
        versions: &["10.0.20348.1607", "10.0.20348.2227", "10.0.20348.2655", "10.0.20348.3091", "10.0.20348.4171"],
        roles: &[Role::WindowsServer],
        weight: 60,
        arm64_percent: 0,
        os_product: Some(OsProduct {
            key: "windows",
            subject: "Windows Server 2022",
            cpe: "cpe:2.3:o:microsoft:windows_server_2022:{version}:*:*:*:*:*:*:*",
        }),
    },
    OsRelease {
        key: "ws2019",
        family: Family::Windows,
        name: "Windows Server 2019 Standard",
        vendor: "Microsoft",
        versions: &["10.0.17763.4131", "10.0.17763.5329", "10.0.17763.6189", "10.0.17763.7678"],
        roles: &[Role::WindowsServer],
        weight: 40,
        arm64_percent: 0,
        os_product: Some(OsProduct {
            key: "windows",
            subject: "Windows Server 2019",
            cpe: "cpe:2.3:o:microsoft:windows_server_2019:{version}:*:*:*:*:*:*:*",
        }),
    },
    OsRelease {
        key: "ubuntu-22.04",
        family: Family::Linux,
        name: "Ubuntu 22.04 LTS",
        vendor: "Canonical",
        versions: &["22.04"],
        roles: &[Role::LinuxServer, Role::LinuxWorkstation],
        weight: 35,
        arm64_percent: 15,
        os_product: None,
    },
    OsRelease {
        key: "ubuntu-24.04",
        family: Family::Linux,
        name: "Ubuntu 24.04 LTS",
        vendor: "Canonical",
        versions: &["24.04"],
        roles: &[Role::LinuxServer, Role::LinuxWorkstation],
        weight: 20,
        arm64_percent: 20,
        os_product: None,
    },
    OsRelease {
        key: "debian-12",
        family: Family::Linux,
        name: "Debian GNU/Linux 12 (bookworm)",
        vendor: "Debian",
        versions: &["12.5", "12.7", "12.9"],
        roles: &[Role::LinuxServer],
        weight: 15,
        arm64_percent: 10,
        os_product: None,
    },
    OsRelease {
        key: "rhel-9",
        family: Family::Linux,
        name: "Red Hat Enterprise Linux 9",
        vendor: "Red Hat",
        versions: &["9.2", "9.3", "9.4"],
        roles: &[Role::LinuxServer],
        weight: 18,
        arm64_percent: 5,
        os_product: None,
    },
    OsRelease {
        key: "amzn-2",
        family: Family::Linux,
        name: "Amazon Linux 2",
        vendor: "Amazon",
        versions: &["2"],
        roles: &[Role::LinuxServer],
        weight: 12,
        arm64_percent: 35,
        os_product: None,
    },
];

// ---------------------------------------------------------------------------
// Software
// ---------------------------------------------------------------------------

/// Upstream vendor builds share one stream; distro packages use the OS
/// release key as their stream.
pub const UPSTREAM: &str = "upstream";

/// One way a product exists on endpoints.
///
/// Templates may use `{version}`, `{brew}` (Homebrew prefix), `{multiarch}`
/// (Debian multiarch triplet), `{deb_arch}`, `{rpm_arch}` and, for copies
/// bundled inside applications, `{app_dir}`.
pub struct Build {
    pub stream: &'static str,
    pub families: &'static [Family],
    pub versions: &'static [&'static str],
    pub install_path: Option<&'static str>,
    /// Candidates; `None` means the manager is unknown.
    pub package_managers: &'static [Option<&'static str>],
    pub cpe: Option<&'static str>,
    pub purl: Option<&'static str>,
    /// A private copy inside an application directory (`{app_dir}`).
    pub bundled: bool,
}

pub struct Product {
    pub key: &'static str,
    pub vendor: &'static str,
    pub name: &'static str,
    /// Contract subject type: `software` or `service`.
    pub subject_type: &'static str,
    /// Contract target type of the work that fixes it.
    pub target_type: &'static str,
    pub builds: &'static [Build],
}

const MAC: &[Family] = &[Family::MacOs];
const WIN: &[Family] = &[Family::Windows];
const LINUX: &[Family] = &[Family::Linux];
const UNIX: &[Family] = &[Family::Linux, Family::MacOs];
const ANY: &[Family] = &[Family::Linux, Family::MacOs, Family::Windows];

const APT: &[Option<&str>] = &[Some("apt")];
const DNF: &[Option<&str>] = &[Some("dnf")];
const YUM: &[Option<&str>] = &[Some("yum")];
const HOMEBREW: &[Option<&str>] = &[Some("homebrew")];
const MAC_APP: &[Option<&str>] = &[Some("homebrew"), Some("none"), None];
const WIN_APP: &[Option<&str>] = &[Some("winget"), Some("chocolatey"), Some("msi"), Some("none"), None];
const UNMANAGED: &[Option<&str>] = &[Some("none")];

const fn distro(
    stream: &'static str,
    versions: &'static [&'static str],
    install_path: Option<&'static str>,
    purl: &'static str,
) -> Build {
    let package_managers = if matches!(stream.as_bytes(), [b'r', b'h', ..]) {
        DNF
    } else if matches!(stream.as_bytes(), [b'a', b'm', b'z', ..]) {
        YUM
    } else {
        APT
    };
    Build {
        stream,
        families: LINUX,
        versions,
        install_path,
        package_managers,
        cpe: None,
        purl: Some(purl),
        bundled: false,
    }
}

const fn app(
    families: &'static [Family],
    versions: &'static [&'static str],
    install_path: &'static str,
    package_managers: &'static [Option<&'static str>],
    cpe: &'static str,
) -> Build {
    Build {
        stream: UPSTREAM,
        families,
        versions,
        install_path: Some(install_path),
        package_managers,
        cpe: Some(cpe),
        purl: None,
        bundled: false,
    }
}

const fn library(
    families: &'static [Family],
    versions: &'static [&'static str],
    install_path: &'static str,
    cpe: Option<&'static str>,
    purl: &'static str,
) -> Build {
    Build {
        stream: UPSTREAM,
        families,
        versions,
        install_path: Some(install_path),
        package_managers: UNMANAGED,
        cpe,
        purl: Some(purl),
        bundled: true,
    }
}

const CHROME_VERSIONS: &[&str] = &[
    "112.0.5615.49",
    "114.0.5735.90",
    "116.0.5845.179",
    "117.0.5938.92",
    "119.0.6045.159",
    "120.0.6099.109",
    "124.0.6367.118",
    "128.0.6613.84",
    "130.0.6723.117",
];
const CHROME_CPE: &str = "cpe:2.3:a:google:chrome:{version}:*:*:*:*:*:*:*";
const FIREFOX_VERSIONS: &[&str] = &["117.0", "118.0.2", "124.0.1", "128.0.3", "131.0.3"];
const FIREFOX_CPE: &str = "cpe:2.3:a:mozilla:firefox:{version}:*:*:*:*:*:*:*";
const EDGE_VERSIONS: &[&str] = &["116.0.1938.76", "117.0.2045.43", "120.0.2210.91", "128.0.2739.54", "130.0.2849.80"];
const EDGE_CPE: &str = "cpe:2.3:a:microsoft:edge_chromium:{version}:*:*:*:*:*:*:*";
const ACROBAT_VERSIONS: &[&str] = &["23.003.20244", "23.006.20320", "24.002.20933", "25.001.20693"];
const ACROBAT_CPE: &str = "cpe:2.3:a:adobe:acrobat_reader_dc:{version}:*:*:*:continuous:*:*:*";

const OPENSSL_UPSTREAM: &[&str] = &["3.0.8", "3.0.11", "3.0.13", "3.0.15"];
const OPENSSL_CPE: &str = "cpe:2.3:a:openssl:openssl:{version}:*:*:*:*:*:*:*";
const OPENSSL_PURL: &str = "pkg:generic/openssl@{version}";

pub const PRODUCTS: &[Product] = &[
    Product {
        key: "chrome",
        vendor: "Google",
        name: "Google Chrome",
        subject_type: "software",
        target_type: "software",
        builds: &[
            app(MAC, CHROME_VERSIONS, "/Applications/Google Chrome.app", MAC_APP, CHROME_CPE),
            app(WIN, CHROME_VERSIONS, r"C:\Program Files\Google\Chrome\Application\chrome.exe", WIN_APP, CHROME_CPE),
            app(LINUX, CHROME_VERSIONS, "/opt/google/chrome/chrome", APT, CHROME_CPE),
        ],
    },
    Product {
        key: "firefox",
        vendor: "Mozilla",
        name: "Mozilla Firefox",
        subject_type: "software",
        target_type: "software",
        builds: &[
            app(MAC, FIREFOX_VERSIONS, "/Applications/Firefox.app", MAC_APP, FIREFOX_CPE),
            app(WIN, FIREFOX_VERSIONS, r"C:\Program Files\Mozilla Firefox\firefox.exe", WIN_APP, FIREFOX_CPE),
        ],
    },
    Product {
        key: "edge",
        vendor: "Microsoft",
        name: "Microsoft Edge",
        subject_type: "software",
        target_type: "software",
        builds: &[
            app(MAC, EDGE_VERSIONS, "/Applications/Microsoft Edge.app", MAC_APP, EDGE_CPE),
            app(
                WIN,
                EDGE_VERSIONS,
                r"C:\Program Files (x86)\Microsoft\Edge\Application\msedge.exe",
                &[Some("winget"), None],
                EDGE_CPE,
            ),
        ],
    },
    Product {
        key: "acrobat-reader",
        vendor: "Adobe",
        name: "Acrobat Reader",
        subject_type: "software",
        target_type: "software",
        builds: &[
            app(MAC, ACROBAT_VERSIONS, "/Applications/Adobe Acrobat Reader.app", MAC_APP, ACROBAT_CPE),
            app(WIN, ACROBAT_VERSIONS, r"C:\Program Files\Adobe\Acrobat DC\Acrobat\Acrobat.exe", WIN_APP, ACROBAT_CPE),
        ],
    },
    Product {
        key: "m365-apps",
        vendor: "Microsoft",
        name: "Microsoft 365 Apps for enterprise",
        subject_type: "software",
        target_type: "software",
        builds: &[app(
            WIN,
            &[
                "16.0.15928.20216",
                "16.0.16130.20218",
                "16.0.16731.20234",
                "16.0.17029.20108",
                "16.0.17328.20184",
                "16.0.18129.20158",
            ],
            r"C:\Program Files\Microsoft Office\root\Office16\OUTLOOK.EXE",
            &[Some("none"), None],
            "cpe:2.3:a:microsoft:365_apps:{version}:*:*:*:enterprise:*:*:*",
        )],
    },
    Product {
        key: "7-zip",
        vendor: "Igor Pavlov",
        name: "7-Zip",
        subject_type: "software",
        target_type: "software",
        builds: &[app(
            WIN,
            &["19.00", "22.01", "23.01", "24.08"],
            r"C:\Program Files\7-Zip\7z.exe",
            WIN_APP,
            "cpe:2.3:a:7-zip:7-zip:{version}:*:*:*:*:*:*:*",
        )],
    },
    Product {
        key: "winrar",
        vendor: "RARLAB",
        name: "WinRAR",
        subject_type: "software",
        target_type: "software",
        builds: &[app(
            WIN,
            &["5.91", "6.11", "6.22", "6.24", "7.01"],
            r"C:\Program Files\WinRAR\WinRAR.exe",
            WIN_APP,
            "cpe:2.3:a:rarlab:winrar:{version}:*:*:*:*:*:*:*",
        )],
    },
    Product {
        key: "putty",
        vendor: "Simon Tatham",
        name: "PuTTY",
        subject_type: "software",
        target_type: "software",
        builds: &[app(
            WIN,
            &["0.76", "0.78", "0.79", "0.81", "0.83"],
            r"C:\Program Files\PuTTY\putty.exe",
            WIN_APP,
            "cpe:2.3:a:putty:putty:{version}:*:*:*:*:*:*:*",
        )],
    },
    Product {
        key: "curl",
        vendor: "Haxx",
        name: "curl",
        subject_type: "software",
        target_type: "software",
        builds: &[
            Build {
                stream: UPSTREAM,
                families: MAC,
                versions: &["8.1.2", "8.2.1", "8.4.0", "8.7.1"],
                install_path: Some("{brew}/Cellar/curl/{version}/bin/curl"),
                package_managers: HOMEBREW,
                cpe: Some("cpe:2.3:a:haxx:curl:{version}:*:*:*:*:*:*:*"),
                purl: Some("pkg:brew/curl@{version}"),
                bundled: false,
            },
            distro(
                "ubuntu-22.04",
                &["7.81.0-1ubuntu1.10", "7.81.0-1ubuntu1.14", "7.81.0-1ubuntu1.16"],
                Some("/usr/lib/{multiarch}/libcurl.so.4"),
                "pkg:deb/ubuntu/libcurl4@{version}?arch={deb_arch}&distro=ubuntu-22.04",
            ),
            distro(
                "debian-12",
                &["7.88.1-10+deb12u1", "7.88.1-10+deb12u4", "7.88.1-10+deb12u7"],
                Some("/usr/lib/{multiarch}/libcurl.so.4"),
                "pkg:deb/debian/libcurl4@{version}?arch={deb_arch}&distro=debian-12",
            ),
            distro(
                "rhel-9",
                &["7.76.1-23.el9", "7.76.1-26.el9_3.2", "7.76.1-29.el9_4.1"],
                Some("/usr/lib64/libcurl.so.4"),
                "pkg:rpm/redhat/libcurl@{version}?arch={rpm_arch}&distro=rhel-9",
            ),
        ],
    },
    Product {
        key: "xz",
        vendor: "Tukaani",
        name: "XZ Utils",
        subject_type: "software",
        target_type: "software",
        builds: &[Build {
            stream: UPSTREAM,
            families: MAC,
            versions: &["5.4.4", "5.4.6", "5.6.1", "5.6.3"],
            install_path: Some("{brew}/Cellar/xz/{version}/lib/liblzma.5.dylib"),
            package_managers: HOMEBREW,
            cpe: Some("cpe:2.3:a:tukaani:xz:{version}:*:*:*:*:*:*:*"),
            purl: Some("pkg:brew/xz@{version}"),
            bundled: false,
        }],
    },
    Product {
        key: "openssl",
        vendor: "OpenSSL",
        name: "OpenSSL",
        subject_type: "software",
        target_type: "software",
        builds: &[
            distro(
                "ubuntu-22.04",
                &["3.0.2-0ubuntu1.10", "3.0.2-0ubuntu1.12", "3.0.2-0ubuntu1.15", "3.0.2-0ubuntu1.18"],
                Some("/usr/lib/{multiarch}/libssl.so.3"),
                "pkg:deb/ubuntu/libssl3@{version}?arch={deb_arch}&distro=ubuntu-22.04",
            ),
            distro(
                "ubuntu-24.04",
                &["3.0.13-0ubuntu3.1", "3.0.13-0ubuntu3.4", "3.0.13-0ubuntu3.5"],
                Some("/usr/lib/{multiarch}/libssl.so.3"),
                "pkg:deb/ubuntu/libssl3t64@{version}?arch={deb_arch}&distro=ubuntu-24.04",
            ),
            distro(
                "debian-12",
                &["3.0.11-1~deb12u1", "3.0.11-1~deb12u2", "3.0.13-1~deb12u1", "3.0.15-1~deb12u1"],
                Some("/usr/lib/{multiarch}/libssl.so.3"),
                "pkg:deb/debian/libssl3@{version}?arch={deb_arch}&distro=debian-12",
            ),
            distro(
                "rhel-9",
                &["3.0.7-16.el9_2", "3.0.7-24.el9", "3.0.7-27.el9", "3.0.7-28.el9_4"],
                Some("/usr/lib64/libssl.so.3"),
                "pkg:rpm/redhat/openssl-libs@{version}?arch={rpm_arch}&distro=rhel-9",
            ),
            library(LINUX, OPENSSL_UPSTREAM, "{app_dir}/lib/libssl.so.3", Some(OPENSSL_CPE), OPENSSL_PURL),
            library(MAC, OPENSSL_UPSTREAM, "{app_dir}/lib/libssl.3.dylib", Some(OPENSSL_CPE), OPENSSL_PURL),
            library(WIN, OPENSSL_UPSTREAM, "{app_dir}/bin/libssl-3-x64.dll", Some(OPENSSL_CPE), OPENSSL_PURL),
        ],
    },
    Product {
        key: "openssh",
        vendor: "OpenBSD",
        name: "OpenSSH",
        subject_type: "service",
        target_type: "service",
        builds: &[
            distro(
                "ubuntu-22.04",
                &["1:8.9p1-3ubuntu0.4", "1:8.9p1-3ubuntu0.6", "1:8.9p1-3ubuntu0.10"],
                Some("/usr/sbin/sshd"),
                "pkg:deb/ubuntu/openssh-server@{version}?arch={deb_arch}&distro=ubuntu-22.04",
            ),
            distro(
                "ubuntu-24.04",
                &["1:9.6p1-3ubuntu13", "1:9.6p1-3ubuntu13.5"],
                Some("/usr/sbin/sshd"),
                "pkg:deb/ubuntu/openssh-server@{version}?arch={deb_arch}&distro=ubuntu-24.04",
            ),
            distro(
                "debian-12",
                &["1:9.2p1-2+deb12u1", "1:9.2p1-2+deb12u2", "1:9.2p1-2+deb12u3"],
                Some("/usr/sbin/sshd"),
                "pkg:deb/debian/openssh-server@{version}?arch={deb_arch}&distro=debian-12",
            ),
            distro(
                "rhel-9",
                &["8.7p1-34.el9", "8.7p1-38.el9", "8.7p1-38.el9_4.4"],
                Some("/usr/sbin/sshd"),
                "pkg:rpm/redhat/openssh-server@{version}?arch={rpm_arch}&distro=rhel-9",
            ),
        ],
    },
    Product {
        key: "glibc",
        vendor: "GNU",
        name: "glibc",
        subject_type: "software",
        target_type: "software",
        builds: &[
            distro(
                "ubuntu-22.04",
                &["2.35-0ubuntu3.1", "2.35-0ubuntu3.4", "2.35-0ubuntu3.8"],
                Some("/usr/lib/{multiarch}/libc.so.6"),
                "pkg:deb/ubuntu/libc6@{version}?arch={deb_arch}&distro=ubuntu-22.04",
            ),
            distro(
                "debian-12",
                &["2.36-9+deb12u1", "2.36-9+deb12u3", "2.36-9+deb12u7"],
                Some("/usr/lib/{multiarch}/libc.so.6"),
                "pkg:deb/debian/libc6@{version}?arch={deb_arch}&distro=debian-12",
            ),
            distro(
                "rhel-9",
                &["2.34-60.el9", "2.34-60.el9_2.7", "2.34-100.el9_4.2"],
                Some("/usr/lib64/libc.so.6"),
                "pkg:rpm/redhat/glibc@{version}?arch={rpm_arch}&distro=rhel-9",
            ),
        ],
    },
    Product {
        key: "sudo",
        vendor: "Sudo Project",
        name: "sudo",
        subject_type: "software",
        target_type: "software",
        builds: &[
            distro(
                "ubuntu-22.04",
                &["1.9.9-1ubuntu2.1", "1.9.9-1ubuntu2.4"],
                Some("/usr/bin/sudo"),
                "pkg:deb/ubuntu/sudo@{version}?arch={deb_arch}&distro=ubuntu-22.04",
            ),
            distro(
                "rhel-9",
                &["1.9.5p2-7.el9", "1.9.5p2-9.el9"],
                Some("/usr/bin/sudo"),
                "pkg:rpm/redhat/sudo@{version}?arch={rpm_arch}&distro=rhel-9",
            ),
        ],
    },
    Product {
        key: "polkit",
        vendor: "polkit project",
        name: "polkit",
        subject_type: "software",
        target_type: "software",
        builds: &[distro(
            "amzn-2",
            &["0.112-26.amzn2", "0.112-26.amzn2.1", "0.112-26.amzn2.2"],
            Some("/usr/bin/pkexec"),
            "pkg:rpm/amazon/polkit@{version}?arch={rpm_arch}&distro=amazon-2",
        )],
    },
    Product {
        key: "linux-kernel",
        vendor: "Linux",
        name: "Linux kernel",
        subject_type: "software",
        target_type: "os_patch",
        builds: &[
            distro(
                "ubuntu-22.04",
                &["5.15.0-60.66", "5.15.0-91.101", "5.15.0-105.115", "5.15.0-122.132"],
                None,
                "pkg:deb/ubuntu/linux@{version}?arch={deb_arch}&distro=ubuntu-22.04",
            ),
            distro(
                "debian-12",
                &["6.1.55-1", "6.1.69-1", "6.1.90-1", "6.1.112-1"],
                None,
                "pkg:deb/debian/linux@{version}?arch={deb_arch}&distro=debian-12",
            ),
            distro(
                "rhel-9",
                &["5.14.0-162.6.1.el9_1", "5.14.0-284.11.1.el9_2", "5.14.0-362.8.1.el9_3", "5.14.0-427.13.1.el9_4"],
                None,
                "pkg:rpm/redhat/kernel@{version}?arch={rpm_arch}&distro=rhel-9",
            ),
            distro(
                "amzn-2",
                &["5.10.93-87.444.amzn2", "5.10.184-175.731.amzn2", "5.10.220-209.869.amzn2"],
                None,
                "pkg:rpm/amazon/kernel@{version}?arch={rpm_arch}&distro=amazon-2",
            ),
        ],
    },
    Product {
        key: "log4j-core",
        vendor: "Apache",
        name: "Log4j",
        subject_type: "software",
        target_type: "software",
        builds: &[library(
            ANY,
            &["2.11.1", "2.14.1", "2.16.0", "2.17.0", "2.17.1", "2.23.1"],
            "{app_dir}/lib/log4j-core-{version}.jar",
            Some("cpe:2.3:a:apache:log4j:{version}:*:*:*:*:*:*:*"),
            "pkg:maven/org.apache.logging.log4j/log4j-core@{version}",
        )],
    },
    Product {
        key: "spring-beans",
        vendor: "VMware",
        name: "Spring Framework",
        subject_type: "software",
        target_type: "software",
        builds: &[library(
            ANY,
            &["5.3.15", "5.3.17", "5.3.20", "5.3.31", "6.0.11"],
            "{app_dir}/lib/spring-beans-{version}.jar",
            Some("cpe:2.3:a:vmware:spring_framework:{version}:*:*:*:*:*:*:*"),
            "pkg:maven/org.springframework/spring-beans@{version}",
        )],
    },
    Product {
        key: "urllib3",
        vendor: "urllib3",
        name: "urllib3",
        subject_type: "software",
        target_type: "software",
        builds: &[
            library(
                UNIX,
                &["1.26.5", "1.26.15", "1.26.18", "1.26.20"],
                "{app_dir}/lib/python3.11/site-packages/urllib3",
                Some("cpe:2.3:a:python:urllib3:{version}:*:*:*:*:*:*:*"),
                "pkg:pypi/urllib3@{version}",
            ),
            library(
                WIN,
                &["1.26.5", "1.26.15", "1.26.18", "1.26.20"],
                "{app_dir}/Lib/site-packages/urllib3",
                Some("cpe:2.3:a:python:urllib3:{version}:*:*:*:*:*:*:*"),
                "pkg:pypi/urllib3@{version}",
            ),
        ],
    },
    Product {
        key: "requests",
        vendor: "Python Software Foundation",
        name: "Requests",
        subject_type: "software",
        target_type: "software",
        builds: &[
            library(
                UNIX,
                &["2.25.1", "2.28.2", "2.31.0", "2.32.3"],
                "{app_dir}/lib/python3.11/site-packages/requests",
                Some("cpe:2.3:a:python:requests:{version}:*:*:*:*:*:*:*"),
                "pkg:pypi/requests@{version}",
            ),
            library(
                WIN,
                &["2.25.1", "2.28.2", "2.31.0", "2.32.3"],
                "{app_dir}/Lib/site-packages/requests",
                Some("cpe:2.3:a:python:requests:{version}:*:*:*:*:*:*:*"),
                "pkg:pypi/requests@{version}",
            ),
        ],
    },
    Product {
        key: "lodash",
        vendor: "Lodash",
        name: "lodash",
        subject_type: "software",
        target_type: "software",
        builds: &[library(
            ANY,
            &["4.17.15", "4.17.19", "4.17.20", "4.17.21"],
            "{app_dir}/node_modules/lodash",
            Some("cpe:2.3:a:lodash:lodash:{version}:*:*:*:*:node.js:*:*"),
            "pkg:npm/lodash@{version}",
        )],
    },
    Product {
        key: "semver",
        vendor: "npm",
        name: "semver",
        subject_type: "software",
        target_type: "software",
        builds: &[library(
            ANY,
            &["5.7.1", "7.3.5", "7.5.1", "7.5.4", "7.6.3"],
            "{app_dir}/node_modules/semver",
            Some("cpe:2.3:a:npmjs:semver:{version}:*:*:*:*:node.js:*:*"),
            "pkg:npm/semver@{version}",
        )],
    },
    Product {
        key: "ws",
        vendor: "ws project",
        name: "ws",
        subject_type: "software",
        target_type: "software",
        builds: &[library(
            ANY,
            &["7.4.6", "8.11.0", "8.13.0", "8.17.1", "8.18.0"],
            "{app_dir}/node_modules/ws",
            Some("cpe:2.3:a:ws_project:ws:{version}:*:*:*:*:node.js:*:*"),
            "pkg:npm/ws@{version}",
        )],
    },
    Product {
        key: "golang-x-net",
        vendor: "Go",
        name: "golang.org/x/net",
        subject_type: "software",
        target_type: "software",
        builds: &[
            library(
                UNIX,
                &["v0.5.0", "v0.7.0", "v0.15.0", "v0.17.0", "v0.23.0"],
                "{app_dir}/bin/server",
                None,
                "pkg:golang/golang.org/x/net@{version}",
            ),
            library(
                WIN,
                &["v0.5.0", "v0.7.0", "v0.15.0", "v0.17.0", "v0.23.0"],
                "{app_dir}/bin/server.exe",
                None,
                "pkg:golang/golang.org/x/net@{version}",
            ),
        ],
    },
];

/// Libraries that applications bundle privately (one installation per
/// application directory).
pub const BUNDLED_LIBRARIES: &[&str] =
    &["log4j-core", "spring-beans", "urllib3", "requests", "lodash", "semver", "ws", "golang-x-net", "openssl"];

/// A product a role usually has, with its likelihood (percent) for most
/// owners and for engineers.
pub struct InventoryItem {
    pub product: &'static str,
    pub percent: u32,
    pub engineering_percent: u32,
}

const fn item(product: &'static str, percent: u32, engineering_percent: u32) -> InventoryItem {
    InventoryItem { product, percent, engineering_percent }
}

const MAC_LAPTOP_INVENTORY: &[InventoryItem] = &[
    item("chrome", 85, 90),
    item("firefox", 25, 45),
    item("edge", 15, 10),
    item("acrobat-reader", 45, 20),
    item("curl", 5, 55),
    item("xz", 3, 45),
];

const WINDOWS_WORKSTATION_INVENTORY: &[InventoryItem] = &[
    item("chrome", 75, 85),
    item("edge", 100, 100),
    item("firefox", 20, 40),
    item("m365-apps", 90, 75),
    item("acrobat-reader", 55, 30),
    item("7-zip", 40, 60),
    item("winrar", 20, 15),
    item("putty", 5, 50),
];

const WINDOWS_SERVER_INVENTORY: &[InventoryItem] =
    &[item("edge", 60, 60), item("chrome", 15, 15), item("7-zip", 30, 30), item("putty", 15, 15)];

const LINUX_SERVER_INVENTORY: &[InventoryItem] = &[
    item("openssl", 97, 97),
    item("openssh", 95, 95),
    item("glibc", 100, 100),
    item("sudo", 90, 90),
    item("curl", 85, 85),
    item("polkit", 45, 45),
    item("linux-kernel", 100, 100),
];

const LINUX_WORKSTATION_INVENTORY: &[InventoryItem] = &[
    item("openssl", 100, 100),
    item("openssh", 60, 60),
    item("glibc", 100, 100),
    item("sudo", 100, 100),
    item("curl", 100, 100),
    item("linux-kernel", 100, 100),
    item("chrome", 90, 90),
];

/// The software a role usually has (the OS itself comes from its release).
pub fn inventory(role: Role) -> &'static [InventoryItem] {
    match role {
        Role::MacLaptop => MAC_LAPTOP_INVENTORY,
        Role::WindowsWorkstation => WINDOWS_WORKSTATION_INVENTORY,
        Role::WindowsServer => WINDOWS_SERVER_INVENTORY,
        Role::LinuxServer => LINUX_SERVER_INVENTORY,
        Role::LinuxWorkstation => LINUX_WORKSTATION_INVENTORY,
    }
}

// ---------------------------------------------------------------------------
// CVEs
// ---------------------------------------------------------------------------

/// Versions in `[introduced, fixed)` of one stream are vulnerable.
pub struct Fix {
    pub stream: &'static str,
    pub introduced: Option<&'static str>,
    pub fixed: &'static str,
}

const fn fix(stream: &'static str, fixed: &'static str) -> Fix {
    Fix { stream, introduced: None, fixed }
}

const fn fix_from(stream: &'static str, introduced: &'static str, fixed: &'static str) -> Fix {
    Fix { stream, introduced: Some(introduced), fixed }
}

/// One CVE as it affects one product (a CVE in a shared component, such as
/// libwebp, appears once per product).
pub struct Cve {
    pub id: &'static str,
    /// Product key, or the OS product key (`macos`, `windows`).
    pub product: &'static str,
    pub title: &'static str,
    pub description: &'static str,
    /// CVSS 3.1 base vector; the score is computed from it.
    pub vector: &'static str,
    /// Listed in CISA's Known Exploited Vulnerabilities catalogue.
    pub kev: bool,
    pub epss: f64,
    pub fixes: &'static [Fix],
}

const NET_UI_HIGH: &str = "CVSS:3.1/AV:N/AC:L/PR:N/UI:R/S:U/C:H/I:H/A:H";
const NET_UI_CHANGED: &str = "CVSS:3.1/AV:N/AC:L/PR:N/UI:R/S:C/C:H/I:H/A:H";
const NET_CRITICAL: &str = "CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H";
const NET_CHANGED_CRITICAL: &str = "CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:C/C:H/I:H/A:H";
const LOCAL_PRIV_ESC: &str = "CVSS:3.1/AV:L/AC:L/PR:L/UI:N/S:U/C:H/I:H/A:H";
const LOCAL_USER_OPENS_FILE: &str = "CVSS:3.1/AV:L/AC:L/PR:N/UI:R/S:U/C:H/I:H/A:H";
const NET_DOS: &str = "CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:N/I:N/A:H";
const NET_LOW_DOS: &str = "CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:N/I:N/A:L";

/// Windows cumulative-update builds, per release stream, that fixed a month's CVEs.
macro_rules! windows_fixes {
    ($($stream:literal => $build:literal),+ $(,)?) => {
        &[$(fix($stream, $build)),+]
    };
}

pub const CVES: &[Cve] = &[
    // --- Google Chrome -------------------------------------------------------
    Cve {
        id: "CVE-2023-2033",
        product: "chrome",
        title: "Google Chrome V8 type confusion",
        description: "Type confusion in V8 in Google Chrome prior to 112.0.5615.121 allowed a remote attacker to potentially exploit heap corruption via a crafted HTML page.",
        vector: NET_UI_HIGH,
        kev: true,
        epss: 0.6411,
        fixes: &[fix(UPSTREAM, "112.0.5615.121")],
    },
    Cve {
        id: "CVE-2023-3079",
        product: "chrome",
        title: "Google Chrome V8 type confusion",
        description: "Type confusion in V8 in Google Chrome prior to 114.0.5735.110 allowed a remote attacker to potentially exploit heap corruption via a crafted HTML page.",
        vector: NET_UI_HIGH,
        kev: true,
        epss: 0.3129,
        fixes: &[fix(UPSTREAM, "114.0.5735.110")],
    },
    Cve {
        id: "CVE-2023-4863",
        product: "chrome",
        title: "Heap buffer overflow in libwebp (Google Chrome)",
        description: "Heap buffer overflow in libwebp in Google Chrome prior to 116.0.5845.187 allowed a remote attacker to perform an out of bounds memory write via a crafted HTML page.",
        vector: NET_UI_HIGH,
        kev: true,
        epss: 0.9374,
        fixes: &[fix(UPSTREAM, "116.0.5845.187")],
    },
    Cve {
        id: "CVE-2023-5217",
        product: "chrome",
        title: "Heap buffer overflow in libvpx VP8 encoding (Google Chrome)",
        description: "Heap buffer overflow in vp8 encoding in libvpx in Google Chrome prior to 117.0.5938.132 allowed a remote attacker to potentially exploit heap corruption via a crafted HTML page.",
        vector: NET_UI_HIGH,
        kev: true,
        epss: 0.3655,
        fixes: &[fix(UPSTREAM, "117.0.5938.132")],
    },
    Cve {
        id: "CVE-2023-6345",
        product: "chrome",
        title: "Google Chrome Skia integer overflow",
        description: "Integer overflow in Skia in Google Chrome prior to 119.0.6045.199 allowed a remote attacker who had compromised the renderer process to potentially perform a sandbox escape via a malicious file.",
        vector: NET_UI_CHANGED,
        kev: true,
        epss: 0.0412,
        fixes: &[fix(UPSTREAM, "119.0.6045.199")],
    },
    Cve {
        id: "CVE-2023-7024",
        product: "chrome",
        title: "Google Chrome WebRTC heap buffer overflow",
        description: "Heap buffer overflow in WebRTC in Google Chrome prior to 120.0.6099.129 allowed a remote attacker to potentially exploit heap corruption via a crafted HTML page.",
        vector: NET_UI_HIGH,
        kev: true,
        epss: 0.1487,
        fixes: &[fix(UPSTREAM, "120.0.6099.129")],
    },
    Cve {
        id: "CVE-2024-0519",
        product: "chrome",
        title: "Google Chrome V8 out of bounds memory access",
        description: "Out of bounds memory access in V8 in Google Chrome prior to 120.0.6099.224 allowed a remote attacker to potentially exploit heap corruption via a crafted HTML page.",
        vector: NET_UI_HIGH,
        kev: true,
        epss: 0.2032,
        fixes: &[fix(UPSTREAM, "120.0.6099.224")],
    },
    Cve {
        id: "CVE-2024-4671",
        product: "chrome",
        title: "Google Chrome use after free in Visuals",
        description: "Use after free in Visuals in Google Chrome prior to 124.0.6367.201 allowed a remote attacker who had compromised the renderer process to potentially perform a sandbox escape via a crafted HTML page.",
        vector: NET_UI_CHANGED,
        kev: true,
        epss: 0.0218,
        fixes: &[fix(UPSTREAM, "124.0.6367.201")],
    },
    Cve {
        id: "CVE-2024-7971",
        product: "chrome",
        title: "Google Chrome V8 type confusion",
        description: "Type confusion in V8 in Google Chrome prior to 128.0.6613.84 allowed a remote attacker to exploit heap corruption via a crafted HTML page.",
        vector: NET_UI_HIGH,
        kev: true,
        epss: 0.0617,
        fixes: &[fix(UPSTREAM, "128.0.6613.84")],
    },
    // --- Mozilla Firefox -----------------------------------------------------
    Cve {
        id: "CVE-2023-4863",
        product: "firefox",
        title: "Heap buffer overflow in libwebp (Mozilla Firefox)",
        description: "Opening a malicious WebP image could lead to a heap buffer overflow in the content process.",
        vector: NET_UI_HIGH,
        kev: true,
        epss: 0.9374,
        fixes: &[fix(UPSTREAM, "117.0.1")],
    },
    Cve {
        id: "CVE-2023-5217",
        product: "firefox",
        title: "Heap buffer overflow in libvpx (Mozilla Firefox)",
        description: "A heap buffer overflow in libvpx could be triggered by crafted VP8 media, leading to a potentially exploitable crash.",
        vector: NET_UI_HIGH,
        kev: true,
        epss: 0.3655,
        fixes: &[fix(UPSTREAM, "118.0.1")],
    },
    Cve {
        id: "CVE-2024-9680",
        product: "firefox",
        title: "Mozilla Firefox use-after-free in Animation timelines",
        description: "An attacker was able to achieve code execution in the content process by exploiting a use-after-free in Animation timelines. Exploited in the wild.",
        vector: NET_CRITICAL,
        kev: true,
        epss: 0.2614,
        fixes: &[fix(UPSTREAM, "131.0.2")],
    },
    // --- Microsoft Edge ------------------------------------------------------
    Cve {
        id: "CVE-2023-4863",
        product: "edge",
        title: "Heap buffer overflow in libwebp (Microsoft Edge)",
        description: "Chromium heap buffer overflow in libwebp, fixed in Microsoft Edge (Chromium-based) 116.0.1938.81.",
        vector: NET_UI_HIGH,
        kev: true,
        epss: 0.9374,
        fixes: &[fix(UPSTREAM, "116.0.1938.81")],
    },
    Cve {
        id: "CVE-2023-5217",
        product: "edge",
        title: "Heap buffer overflow in libvpx (Microsoft Edge)",
        description: "Chromium heap buffer overflow in libvpx VP8 encoding, fixed in Microsoft Edge (Chromium-based) 117.0.2045.47.",
        vector: NET_UI_HIGH,
        kev: true,
        epss: 0.3655,
        fixes: &[fix(UPSTREAM, "117.0.2045.47")],
    },
    Cve {
        id: "CVE-2024-7971",
        product: "edge",
        title: "Chromium V8 type confusion (Microsoft Edge)",
        description: "Chromium V8 type confusion exploited in the wild, fixed in Microsoft Edge (Chromium-based) 128.0.2739.42.",
        vector: NET_UI_HIGH,
        kev: true,
        epss: 0.0617,
        fixes: &[fix(UPSTREAM, "128.0.2739.42")],
    },
    // --- Adobe Acrobat Reader ------------------------------------------------
    Cve {
        id: "CVE-2023-26369",
        product: "acrobat-reader",
        title: "Adobe Acrobat Reader out-of-bounds write",
        description: "Acrobat Reader is affected by an out-of-bounds write vulnerability that could result in arbitrary code execution in the context of the current user when a victim opens a malicious file.",
        vector: LOCAL_USER_OPENS_FILE,
        kev: true,
        epss: 0.0871,
        fixes: &[fix(UPSTREAM, "23.006.20320")],
    },
    Cve {
        id: "CVE-2024-41869",
        product: "acrobat-reader",
        title: "Adobe Acrobat Reader use-after-free",
        description: "Acrobat Reader is affected by a use-after-free vulnerability that could lead to remote code execution when a victim opens a malicious file.",
        vector: LOCAL_USER_OPENS_FILE,
        kev: false,
        epss: 0.0215,
        fixes: &[fix(UPSTREAM, "24.003.20112")],
    },
    // --- Microsoft 365 Apps ------------------------------------------------
    Cve {
        id: "CVE-2023-21716",
        product: "m365-apps",
        title: "Microsoft Word remote code execution (RTF font table)",
        description: "A heap corruption in Word's RTF parser, triggered by a crafted font table, allows remote code execution; the preview pane is an attack vector.",
        vector: NET_CRITICAL,
        kev: false,
        epss: 0.4126,
        fixes: &[fix(UPSTREAM, "16.0.16026.20200")],
    },
    Cve {
        id: "CVE-2023-23397",
        product: "m365-apps",
        title: "Microsoft Outlook elevation of privilege (NTLM relay)",
        description: "A crafted message with an extended MAPI reminder property holding a UNC path makes Outlook leak the user's Net-NTLMv2 hash to an attacker-controlled server, without user interaction.",
        vector: NET_CRITICAL,
        kev: true,
        epss: 0.9245,
        fixes: &[fix(UPSTREAM, "16.0.16130.20306")],
    },
    Cve {
        id: "CVE-2024-21413",
        product: "m365-apps",
        title: "Microsoft Outlook remote code execution (MonikerLink)",
        description: "Outlook mishandles file:// hyperlinks with an exclamation mark, bypassing Protected View and leaking NTLM credentials or enabling code execution.",
        vector: NET_CRITICAL,
        kev: true,
        epss: 0.8902,
        fixes: &[fix(UPSTREAM, "16.0.17231.20236")],
    },
    // --- Windows utilities -------------------------------------------------
    Cve {
        id: "CVE-2024-11477",
        product: "7-zip",
        title: "7-Zip Zstandard decompression integer underflow",
        description: "An integer underflow in the Zstandard decompression code of 7-Zip allows code execution when a user opens a crafted archive.",
        vector: LOCAL_USER_OPENS_FILE,
        kev: false,
        epss: 0.0118,
        fixes: &[fix(UPSTREAM, "24.07")],
    },
    Cve {
        id: "CVE-2023-38831",
        product: "winrar",
        title: "WinRAR spoofed file extension code execution",
        description: "WinRAR before 6.23 allows attackers to execute arbitrary code when a user attempts to view a benign file within a ZIP archive that also holds a folder of the same name.",
        vector: LOCAL_USER_OPENS_FILE,
        kev: true,
        epss: 0.9401,
        fixes: &[fix(UPSTREAM, "6.23")],
    },
    Cve {
        id: "CVE-2023-40477",
        product: "winrar",
        title: "WinRAR recovery volume improper validation",
        description: "Improper validation of array indices when processing recovery volumes in WinRAR allows code execution when a user opens a crafted archive.",
        vector: LOCAL_USER_OPENS_FILE,
        kev: false,
        epss: 0.1935,
        fixes: &[fix(UPSTREAM, "6.23")],
    },
    Cve {
        id: "CVE-2023-48795",
        product: "putty",
        title: "SSH prefix truncation attack (Terrapin) in PuTTY",
        description: "The SSH transport protocol with ChaCha20-Poly1305 or Encrypt-then-MAC ciphers allows a man-in-the-middle to truncate the handshake and downgrade connection security.",
        vector: "CVSS:3.1/AV:N/AC:H/PR:N/UI:N/S:U/C:N/I:H/A:N",
        kev: false,
        epss: 0.5412,
        fixes: &[fix(UPSTREAM, "0.80")],
    },
    Cve {
        id: "CVE-2024-31497",
        product: "putty",
        title: "PuTTY NIST P-521 private key recovery",
        description: "Biased ECDSA nonce generation for NIST P-521 keys lets an attacker who sees about 60 signatures recover the user's private key.",
        vector: "CVSS:3.1/AV:N/AC:H/PR:N/UI:N/S:U/C:H/I:N/A:N",
        kev: false,
        epss: 0.0061,
        fixes: &[fix_from(UPSTREAM, "0.68", "0.81")],
    },
    // --- Windows -------------------------------------------------------------
    Cve {
        id: "CVE-2023-28252",
        product: "windows",
        title: "Windows Common Log File System driver elevation of privilege",
        description: "An out-of-bounds write in the CLFS driver lets a local attacker gain SYSTEM privileges; exploited by ransomware operators.",
        vector: LOCAL_PRIV_ESC,
        kev: true,
        epss: 0.2271,
        fixes: windows_fixes![
            "win11-22h2" => "10.0.22621.1555",
            "win10-22h2" => "10.0.19045.2846",
            "ws2022" => "10.0.20348.1668",
            "ws2019" => "10.0.17763.4252",
        ],
    },
    Cve {
        id: "CVE-2024-21338",
        product: "windows",
        title: "Windows kernel elevation of privilege (appid.sys)",
        description: "An exposed IOCTL in the AppLocker driver lets a local administrator reach kernel read/write primitives; exploited in the wild.",
        vector: LOCAL_PRIV_ESC,
        kev: true,
        epss: 0.0394,
        fixes: windows_fixes![
            "win11-23h2" => "10.0.22631.3155",
            "win11-22h2" => "10.0.22621.3155",
            "win10-22h2" => "10.0.19045.4046",
            "ws2022" => "10.0.20348.2322",
            "ws2019" => "10.0.17763.5458",
        ],
    },
    Cve {
        id: "CVE-2024-21412",
        product: "windows",
        title: "Internet Shortcut Files security feature bypass",
        description: "A crafted Internet Shortcut file bypasses Mark of the Web and SmartScreen warnings when opened.",
        vector: "CVSS:3.1/AV:N/AC:L/PR:N/UI:R/S:U/C:H/I:H/A:N",
        kev: true,
        epss: 0.0512,
        fixes: windows_fixes![
            "win11-23h2" => "10.0.22631.3155",
            "win11-22h2" => "10.0.22621.3155",
            "win10-22h2" => "10.0.19045.4046",
            "ws2022" => "10.0.20348.2322",
            "ws2019" => "10.0.17763.5458",
        ],
    },
    Cve {
        id: "CVE-2024-30051",
        product: "windows",
        title: "Windows DWM Core Library elevation of privilege",
        description: "A heap overflow in the Desktop Window Manager core library lets a local attacker gain SYSTEM privileges; exploited to deploy QakBot.",
        vector: LOCAL_PRIV_ESC,
        kev: true,
        epss: 0.0118,
        fixes: windows_fixes![
            "win11-23h2" => "10.0.22631.3593",
            "win11-22h2" => "10.0.22621.3593",
            "win10-22h2" => "10.0.19045.4412",
            "ws2022" => "10.0.20348.2461",
            "ws2019" => "10.0.17763.5820",
        ],
    },
    Cve {
        id: "CVE-2024-38112",
        product: "windows",
        title: "Windows MSHTML platform spoofing",
        description: "Crafted .url files open pages in the retired Internet Explorer engine through MSHTML, disguising executables as documents.",
        vector: "CVSS:3.1/AV:N/AC:H/PR:N/UI:R/S:U/C:H/I:H/A:H",
        kev: true,
        epss: 0.0624,
        fixes: windows_fixes![
            "win11-23h2" => "10.0.22631.3880",
            "win11-22h2" => "10.0.22621.3880",
            "win10-22h2" => "10.0.19045.4651",
            "ws2022" => "10.0.20348.2582",
            "ws2019" => "10.0.17763.6054",
        ],
    },
    Cve {
        id: "CVE-2024-38063",
        product: "windows",
        title: "Windows TCP/IP remote code execution (IPv6)",
        description: "An integer underflow in the IPv6 packet handling of tcpip.sys allows unauthenticated remote code execution by sending crafted IPv6 packets.",
        vector: NET_CRITICAL,
        kev: false,
        epss: 0.0533,
        fixes: windows_fixes![
            "win11-23h2" => "10.0.22631.4037",
            "win11-22h2" => "10.0.22621.4037",
            "win10-22h2" => "10.0.19045.4780",
            "ws2022" => "10.0.20348.2655",
            "ws2019" => "10.0.17763.6189",
        ],
    },
    Cve {
        id: "CVE-2024-38193",
        product: "windows",
        title: "Windows Ancillary Function Driver for WinSock elevation of privilege",
        description: "A use-after-free in afd.sys lets a local attacker gain SYSTEM privileges; exploited in the wild by the Lazarus group.",
        vector: LOCAL_PRIV_ESC,
        kev: true,
        epss: 0.0089,
        fixes: windows_fixes![
            "win11-23h2" => "10.0.22631.4037",
            "win11-22h2" => "10.0.22621.4037",
            "win10-22h2" => "10.0.19045.4780",
            "ws2022" => "10.0.20348.2655",
            "ws2019" => "10.0.17763.6189",
        ],
    },
    Cve {
        id: "CVE-2024-43451",
        product: "windows",
        title: "NTLM hash disclosure spoofing",
        description: "Minimal interaction with a malicious file, such as selecting or right-clicking it, discloses the user's NTLMv2 hash to a remote attacker.",
        vector: "CVSS:3.1/AV:N/AC:L/PR:N/UI:R/S:U/C:H/I:N/A:N",
        kev: true,
        epss: 0.0305,
        fixes: windows_fixes![
            "win11-24h2" => "10.0.26100.2314",
            "win11-23h2" => "10.0.22631.4460",
            "win11-22h2" => "10.0.22621.4460",
            "win10-22h2" => "10.0.19045.5131",
            "ws2022" => "10.0.20348.2849",
            "ws2019" => "10.0.17763.6532",
        ],
    },
    Cve {
        id: "CVE-2024-49138",
        product: "windows",
        title: "Windows Common Log File System driver elevation of privilege",
        description: "A heap-based buffer overflow in the CLFS driver lets a local attacker gain SYSTEM privileges; exploited in the wild.",
        vector: LOCAL_PRIV_ESC,
        kev: true,
        epss: 0.0214,
        fixes: windows_fixes![
            "win11-24h2" => "10.0.26100.2605",
            "win11-23h2" => "10.0.22631.4602",
            "win11-22h2" => "10.0.22621.4602",
            "win10-22h2" => "10.0.19045.5247",
            "ws2022" => "10.0.20348.2966",
            "ws2019" => "10.0.17763.6659",
        ],
    },
    Cve {
        id: "CVE-2025-29824",
        product: "windows",
        title: "Windows Common Log File System driver elevation of privilege",
        description: "A use-after-free in the CLFS driver lets a local attacker gain SYSTEM privileges; exploited by ransomware operators before the April 2025 update.",
        vector: LOCAL_PRIV_ESC,
        kev: true,
        epss: 0.0167,
        fixes: windows_fixes![
            "win11-24h2" => "10.0.26100.3775",
            "win11-23h2" => "10.0.22631.5189",
            "win11-22h2" => "10.0.22621.5189",
            "win10-22h2" => "10.0.19045.5737",
            "ws2022" => "10.0.20348.3566",
            "ws2019" => "10.0.17763.7136",
        ],
    },
    // --- macOS ---------------------------------------------------------------
    Cve {
        id: "CVE-2023-41064",
        product: "macos",
        title: "Apple ImageIO buffer overflow (BLASTPASS)",
        description: "Processing a maliciously crafted image may lead to arbitrary code execution. Apple is aware of a report that this issue may have been actively exploited.",
        vector: LOCAL_USER_OPENS_FILE,
        kev: true,
        epss: 0.0731,
        fixes: &[fix("ventura", "13.5.2")],
    },
    Cve {
        id: "CVE-2023-41991",
        product: "macos",
        title: "Apple Security framework certificate validation bypass",
        description: "A malicious app may be able to bypass signature validation. Exploited in the wild together with CVE-2023-41992.",
        vector: "CVSS:3.1/AV:L/AC:L/PR:N/UI:R/S:U/C:N/I:H/A:N",
        kev: true,
        epss: 0.0094,
        fixes: &[fix("ventura", "13.6")],
    },
    Cve {
        id: "CVE-2023-41992",
        product: "macos",
        title: "Apple kernel elevation of privilege",
        description: "A local attacker may be able to elevate their privileges. Exploited in the wild together with CVE-2023-41991.",
        vector: LOCAL_PRIV_ESC,
        kev: true,
        epss: 0.0051,
        fixes: &[fix("ventura", "13.6")],
    },
    Cve {
        id: "CVE-2023-42916",
        product: "macos",
        title: "Apple WebKit out-of-bounds read",
        description: "Processing web content may disclose sensitive information. Apple is aware of a report that this issue may have been exploited.",
        vector: "CVSS:3.1/AV:N/AC:L/PR:N/UI:R/S:U/C:H/I:N/A:N",
        kev: true,
        epss: 0.0187,
        fixes: &[fix("sonoma", "14.1.2")],
    },
    Cve {
        id: "CVE-2023-42917",
        product: "macos",
        title: "Apple WebKit memory corruption",
        description: "Processing web content may lead to arbitrary code execution. Apple is aware of a report that this issue may have been exploited.",
        vector: NET_UI_HIGH,
        kev: true,
        epss: 0.0412,
        fixes: &[fix("sonoma", "14.1.2")],
    },
    Cve {
        id: "CVE-2024-23222",
        product: "macos",
        title: "Apple WebKit type confusion",
        description: "Processing maliciously crafted web content may lead to arbitrary code execution. Apple is aware of a report that this issue may have been exploited.",
        vector: NET_UI_HIGH,
        kev: true,
        epss: 0.0523,
        fixes: &[fix("sonoma", "14.3"), fix("ventura", "13.6.4")],
    },
    Cve {
        id: "CVE-2024-44308",
        product: "macos",
        title: "Apple JavaScriptCore arbitrary code execution",
        description: "Processing maliciously crafted web content may lead to arbitrary code execution; actively exploited on Intel-based Mac systems.",
        vector: NET_UI_HIGH,
        kev: true,
        epss: 0.0334,
        fixes: &[fix("sequoia", "15.1.1")],
    },
    Cve {
        id: "CVE-2024-44309",
        product: "macos",
        title: "Apple WebKit cookie management cross-site scripting",
        description: "Processing maliciously crafted web content may lead to a cross-site scripting attack; actively exploited on Intel-based Mac systems.",
        vector: "CVSS:3.1/AV:N/AC:L/PR:N/UI:R/S:C/C:L/I:L/A:N",
        kev: true,
        epss: 0.0146,
        fixes: &[fix("sequoia", "15.1.1")],
    },
    Cve {
        id: "CVE-2024-44243",
        product: "macos",
        title: "Apple StorageKit System Integrity Protection bypass",
        description: "An app may be able to modify protected parts of the file system by loading third-party kernel extensions through storagekitd.",
        vector: "CVSS:3.1/AV:L/AC:L/PR:L/UI:N/S:U/C:N/I:H/A:N",
        kev: false,
        epss: 0.0013,
        fixes: &[fix("sequoia", "15.2"), fix("sonoma", "14.7.2"), fix("ventura", "13.7.2")],
    },
    Cve {
        id: "CVE-2025-24085",
        product: "macos",
        title: "Apple CoreMedia use-after-free",
        description: "A malicious application may be able to elevate privileges. Apple is aware of a report that this issue may have been actively exploited.",
        vector: LOCAL_PRIV_ESC,
        kev: true,
        epss: 0.0288,
        fixes: &[fix("sequoia", "15.3")],
    },
    // --- Homebrew packages on macOS ----------------------------------------
    Cve {
        id: "CVE-2024-3094",
        product: "xz",
        title: "XZ Utils liblzma backdoor",
        description: "Malicious code in the upstream tarballs of xz 5.6.0 and 5.6.1 modifies liblzma so that it can intercept and tamper with data processed by linked programs such as sshd.",
        vector: NET_CHANGED_CRITICAL,
        kev: false,
        epss: 0.8524,
        fixes: &[fix_from(UPSTREAM, "5.6.0", "5.6.2")],
    },
    Cve {
        id: "CVE-2023-38545",
        product: "curl",
        title: "curl SOCKS5 heap buffer overflow",
        description: "A heap buffer overflow in curl's SOCKS5 proxy handshake can be triggered when the hostname is longer than 255 bytes and resolution is delegated to the proxy.",
        vector: NET_CRITICAL,
        kev: false,
        epss: 0.2577,
        fixes: &[
            fix_from(UPSTREAM, "7.69.0", "8.4.0"),
            fix("ubuntu-22.04", "7.81.0-1ubuntu1.14"),
            fix("debian-12", "7.88.1-10+deb12u4"),
            fix("rhel-9", "7.76.1-26.el9_3.2"),
        ],
    },
    Cve {
        id: "CVE-2023-38546",
        product: "curl",
        title: "libcurl cookie injection with none file",
        description: "libcurl could load cookies from a file named 'none' in the working directory when a curl handle is duplicated, allowing cookie injection.",
        vector: "CVSS:3.1/AV:N/AC:H/PR:N/UI:N/S:U/C:N/I:L/A:N",
        kev: false,
        epss: 0.0031,
        fixes: &[
            fix(UPSTREAM, "8.4.0"),
            fix("ubuntu-22.04", "7.81.0-1ubuntu1.14"),
            fix("debian-12", "7.88.1-10+deb12u4"),
            fix("rhel-9", "7.76.1-26.el9_3.2"),
        ],
    },
    // --- OpenSSL -------------------------------------------------------------
    Cve {
        id: "CVE-2023-3817",
        product: "openssl",
        title: "OpenSSL excessive time spent checking DH q parameter",
        description: "Checking excessively long DH keys or parameters may be very slow, allowing a denial of service in applications that call DH_check() on untrusted input.",
        vector: NET_LOW_DOS,
        kev: false,
        epss: 0.0039,
        fixes: &[
            fix_from(UPSTREAM, "3.0.0", "3.0.10"),
            fix("ubuntu-22.04", "3.0.2-0ubuntu1.12"),
            fix("rhel-9", "3.0.7-24.el9"),
        ],
    },
    Cve {
        id: "CVE-2023-5678",
        product: "openssl",
        title: "OpenSSL excessive time generating or checking X9.42 DH keys",
        description: "Generating or checking excessively long X9.42 DH keys or parameters may be very slow, allowing a denial of service.",
        vector: NET_LOW_DOS,
        kev: false,
        epss: 0.0052,
        fixes: &[
            fix_from(UPSTREAM, "3.0.0", "3.0.13"),
            fix("ubuntu-22.04", "3.0.2-0ubuntu1.14"),
            fix("debian-12", "3.0.13-1~deb12u1"),
            fix("rhel-9", "3.0.7-27.el9"),
        ],
    },
    Cve {
        id: "CVE-2024-0727",
        product: "openssl",
        title: "OpenSSL NULL dereference processing malformed PKCS12 files",
        description: "Processing a maliciously formatted PKCS12 file may lead OpenSSL to crash, leading to a denial of service.",
        vector: "CVSS:3.1/AV:L/AC:L/PR:N/UI:R/S:U/C:N/I:N/A:H",
        kev: false,
        epss: 0.0021,
        fixes: &[
            fix_from(UPSTREAM, "3.0.0", "3.0.13"),
            fix("ubuntu-22.04", "3.0.2-0ubuntu1.14"),
            fix("debian-12", "3.0.13-1~deb12u1"),
            fix("rhel-9", "3.0.7-27.el9"),
        ],
    },
    Cve {
        id: "CVE-2024-5535",
        product: "openssl",
        title: "OpenSSL SSL_select_next_proto buffer overread",
        description: "Calling SSL_select_next_proto with an empty supported client protocols buffer may crash or send up to 255 bytes of private memory to the peer.",
        vector: "CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:N/A:H",
        kev: false,
        epss: 0.0087,
        fixes: &[
            fix_from(UPSTREAM, "3.0.0", "3.0.15"),
            fix("ubuntu-22.04", "3.0.2-0ubuntu1.17"),
            fix("ubuntu-24.04", "3.0.13-0ubuntu3.2"),
            fix("debian-12", "3.0.14-1~deb12u1"),
            fix("rhel-9", "3.0.7-29.el9_4"),
        ],
    },
    Cve {
        id: "CVE-2024-6119",
        product: "openssl",
        title: "OpenSSL possible denial of service in X.509 name checks",
        description: "Applications performing certificate name checks against otherName subject alternative names may read an invalid address and terminate abnormally.",
        vector: NET_DOS,
        kev: false,
        epss: 0.0068,
        fixes: &[
            fix_from(UPSTREAM, "3.0.0", "3.0.15"),
            fix("ubuntu-22.04", "3.0.2-0ubuntu1.18"),
            fix("ubuntu-24.04", "3.0.13-0ubuntu3.4"),
            fix("debian-12", "3.0.14-1~deb12u2"),
            fix("rhel-9", "3.0.7-29.el9_4"),
        ],
    },
    // --- OpenSSH -------------------------------------------------------------
    Cve {
        id: "CVE-2024-6387",
        product: "openssh",
        title: "OpenSSH sshd signal handler race condition (regreSSHion)",
        description: "A signal handler race condition in sshd allows an unauthenticated remote attacker to execute code as root on glibc-based Linux systems.",
        vector: "CVSS:3.1/AV:N/AC:H/PR:N/UI:N/S:U/C:H/I:H/A:H",
        kev: false,
        epss: 0.3841,
        fixes: &[
            fix("ubuntu-22.04", "1:8.9p1-3ubuntu0.10"),
            fix("ubuntu-24.04", "1:9.6p1-3ubuntu13.3"),
            fix("debian-12", "1:9.2p1-2+deb12u3"),
            fix("rhel-9", "8.7p1-38.el9_4.1"),
        ],
    },
    Cve {
        id: "CVE-2023-48795",
        product: "openssh",
        title: "SSH prefix truncation attack (Terrapin)",
        description: "The SSH transport protocol with ChaCha20-Poly1305 or Encrypt-then-MAC ciphers allows a man-in-the-middle to truncate the handshake and downgrade connection security.",
        vector: "CVSS:3.1/AV:N/AC:H/PR:N/UI:N/S:U/C:N/I:H/A:N",
        kev: false,
        epss: 0.5412,
        fixes: &[
            fix("ubuntu-22.04", "1:8.9p1-3ubuntu0.5"),
            fix("debian-12", "1:9.2p1-2+deb12u2"),
            fix("rhel-9", "8.7p1-34.el9_3.3"),
        ],
    },
    Cve {
        id: "CVE-2023-51385",
        product: "openssh",
        title: "OpenSSH OS command injection via user or host names",
        description: "Shell metacharacters in a user or host name expanded by a ProxyCommand or Match exec directive can lead to command injection.",
        vector: "CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:L/I:L/A:N",
        kev: false,
        epss: 0.0212,
        fixes: &[
            fix("ubuntu-22.04", "1:8.9p1-3ubuntu0.6"),
            fix("debian-12", "1:9.2p1-2+deb12u2"),
            fix("rhel-9", "8.7p1-38.el9"),
        ],
    },
    // --- Linux userland ------------------------------------------------------
    Cve {
        id: "CVE-2023-4911",
        product: "glibc",
        title: "glibc ld.so GLIBC_TUNABLES buffer overflow (Looney Tunables)",
        description: "A buffer overflow in the dynamic loader's handling of the GLIBC_TUNABLES environment variable lets a local user gain root through setuid binaries.",
        vector: LOCAL_PRIV_ESC,
        kev: true,
        epss: 0.7381,
        fixes: &[
            fix("ubuntu-22.04", "2.35-0ubuntu3.4"),
            fix("debian-12", "2.36-9+deb12u3"),
            fix("rhel-9", "2.34-60.el9_2.7"),
        ],
    },
    Cve {
        id: "CVE-2023-22809",
        product: "sudo",
        title: "sudoedit arbitrary file write",
        description: "Extra arguments in user-provided editor environment variables let a sudoedit user edit arbitrary files and escalate privileges.",
        vector: LOCAL_PRIV_ESC,
        kev: false,
        epss: 0.0592,
        fixes: &[fix("ubuntu-22.04", "1.9.9-1ubuntu2.2"), fix("rhel-9", "1.9.5p2-7.el9_1.1")],
    },
    Cve {
        id: "CVE-2021-4034",
        product: "polkit",
        title: "polkit pkexec local privilege escalation (PwnKit)",
        description: "pkexec mishandles its argument count and can be made to execute environment variables as commands, letting any local user gain root.",
        vector: LOCAL_PRIV_ESC,
        kev: true,
        epss: 0.8567,
        fixes: &[fix("amzn-2", "0.112-26.amzn2.1")],
    },
    Cve {
        id: "CVE-2022-0847",
        product: "linux-kernel",
        title: "Linux kernel pipe buffer flag overwrite (Dirty Pipe)",
        description: "Uninitialized pipe buffer flags let an unprivileged user write to page cache pages of read-only files and escalate to root.",
        vector: LOCAL_PRIV_ESC,
        kev: true,
        epss: 0.8311,
        fixes: &[fix_from("amzn-2", "5.10.0", "5.10.102-99.473.amzn2")],
    },
    Cve {
        id: "CVE-2023-0386",
        product: "linux-kernel",
        title: "Linux kernel OverlayFS setuid file copy-up privilege escalation",
        description: "Improper ownership handling when copying a setuid file from a nosuid mount into OverlayFS lets a local user escalate privileges.",
        vector: LOCAL_PRIV_ESC,
        kev: true,
        epss: 0.1083,
        fixes: &[
            fix("ubuntu-22.04", "5.15.0-70.77"),
            fix("rhel-9", "5.14.0-162.22.2.el9_1"),
            fix("amzn-2", "5.10.178-162.673.amzn2"),
        ],
    },
    Cve {
        id: "CVE-2024-1086",
        product: "linux-kernel",
        title: "Linux kernel netfilter nf_tables use-after-free",
        description: "A use-after-free in nft_verdict_init() of the netfilter nf_tables component can be exploited for local privilege escalation; used by ransomware operators.",
        vector: LOCAL_PRIV_ESC,
        kev: true,
        epss: 0.4628,
        fixes: &[
            fix("ubuntu-22.04", "5.15.0-101.111"),
            fix("debian-12", "6.1.76-1"),
            fix("rhel-9", "5.14.0-362.24.1.el9_3"),
            fix("amzn-2", "5.10.209-198.858.amzn2"),
        ],
    },
    // --- Bundled libraries ---------------------------------------------------
    Cve {
        id: "CVE-2021-44228",
        product: "log4j-core",
        title: "Apache Log4j JNDI remote code execution (Log4Shell)",
        description: "JNDI features used in configuration, log messages and parameters do not protect against attacker-controlled LDAP endpoints, allowing remote code execution through logged strings.",
        vector: NET_CHANGED_CRITICAL,
        kev: true,
        epss: 0.9447,
        fixes: &[fix_from(UPSTREAM, "2.0", "2.15.0")],
    },
    Cve {
        id: "CVE-2021-45046",
        product: "log4j-core",
        title: "Apache Log4j incomplete fix for Log4Shell",
        description: "The fix for CVE-2021-44228 in Log4j 2.15.0 was incomplete in certain non-default configurations, still allowing remote code execution through Thread Context Map lookups.",
        vector: "CVSS:3.1/AV:N/AC:H/PR:N/UI:N/S:C/C:H/I:H/A:H",
        kev: true,
        epss: 0.9436,
        fixes: &[fix_from(UPSTREAM, "2.0", "2.16.0")],
    },
    Cve {
        id: "CVE-2021-45105",
        product: "log4j-core",
        title: "Apache Log4j uncontrolled recursion in lookups",
        description: "Log4j does not protect from uncontrolled recursion from self-referential lookups, allowing a denial of service through crafted Thread Context Map data.",
        vector: "CVSS:3.1/AV:N/AC:H/PR:N/UI:N/S:U/C:N/I:N/A:H",
        kev: false,
        epss: 0.6845,
        fixes: &[fix_from(UPSTREAM, "2.0", "2.17.0")],
    },
    Cve {
        id: "CVE-2021-44832",
        product: "log4j-core",
        title: "Apache Log4j JDBC Appender remote code execution",
        description: "An attacker with permission to modify the logging configuration can configure a JDBC Appender with a JNDI data source URI that executes remote code.",
        vector: "CVSS:3.1/AV:N/AC:H/PR:H/UI:N/S:U/C:H/I:H/A:H",
        kev: false,
        epss: 0.3571,
        fixes: &[fix_from(UPSTREAM, "2.0", "2.17.1")],
    },
    Cve {
        id: "CVE-2022-22965",
        product: "spring-beans",
        title: "Spring Framework data binding remote code execution (Spring4Shell)",
        description: "A Spring MVC or WebFlux application running on JDK 9+ may be vulnerable to remote code execution via data binding when deployed as a WAR on Tomcat.",
        vector: NET_CRITICAL,
        kev: true,
        epss: 0.9448,
        fixes: &[fix_from(UPSTREAM, "5.3.0", "5.3.18")],
    },
    Cve {
        id: "CVE-2022-22950",
        product: "spring-beans",
        title: "Spring Framework SpEL denial of service",
        description: "A user can provide a specially crafted SpEL expression that causes a denial of service.",
        vector: "CVSS:3.1/AV:N/AC:L/PR:L/UI:N/S:U/C:N/I:N/A:H",
        kev: false,
        epss: 0.0116,
        fixes: &[fix_from(UPSTREAM, "5.3.0", "5.3.17")],
    },
    Cve {
        id: "CVE-2023-43804",
        product: "urllib3",
        title: "urllib3 Cookie header not stripped on cross-origin redirect",
        description: "urllib3 does not remove the Cookie HTTP header when following cross-origin redirects, possibly leaking cookies to another host.",
        vector: "CVSS:3.1/AV:N/AC:H/PR:N/UI:N/S:U/C:H/I:H/A:H",
        kev: false,
        epss: 0.0032,
        fixes: &[fix(UPSTREAM, "1.26.17")],
    },
    Cve {
        id: "CVE-2023-45803",
        product: "urllib3",
        title: "urllib3 request body not stripped after 303 redirect",
        description: "urllib3 keeps the request body when an HTTP 303 redirect changes the method to GET, possibly exposing it to another host.",
        vector: "CVSS:3.1/AV:N/AC:H/PR:H/UI:R/S:U/C:H/I:N/A:N",
        kev: false,
        epss: 0.0011,
        fixes: &[fix(UPSTREAM, "1.26.18")],
    },
    Cve {
        id: "CVE-2024-37891",
        product: "urllib3",
        title: "urllib3 Proxy-Authorization header kept on cross-origin redirect",
        description: "When urllib3 is used without its proxy support, a Proxy-Authorization header set by the caller is not stripped on cross-origin redirects.",
        vector: "CVSS:3.1/AV:N/AC:H/PR:H/UI:N/S:U/C:H/I:N/A:N",
        kev: false,
        epss: 0.0009,
        fixes: &[fix(UPSTREAM, "1.26.19")],
    },
    Cve {
        id: "CVE-2023-32681",
        product: "requests",
        title: "Requests Proxy-Authorization header leak",
        description: "Requests leaks Proxy-Authorization headers to destination servers when redirected to an HTTPS endpoint, exposing proxy credentials.",
        vector: "CVSS:3.1/AV:N/AC:H/PR:N/UI:R/S:C/C:H/I:N/A:N",
        kev: false,
        epss: 0.0063,
        fixes: &[fix_from(UPSTREAM, "2.3.0", "2.31.0")],
    },
    Cve {
        id: "CVE-2024-35195",
        product: "requests",
        title: "Requests Session keeps verify=False for later requests",
        description: "If the first request in a Session is made with verify=False, later requests to the same origin keep skipping certificate verification.",
        vector: "CVSS:3.1/AV:L/AC:H/PR:H/UI:R/S:U/C:H/I:H/A:N",
        kev: false,
        epss: 0.0005,
        fixes: &[fix(UPSTREAM, "2.32.0")],
    },
    Cve {
        id: "CVE-2020-8203",
        product: "lodash",
        title: "lodash prototype pollution in zipObjectDeep",
        description: "Prototype pollution in zipObjectDeep allows an attacker to modify Object.prototype properties.",
        vector: "CVSS:3.1/AV:N/AC:H/PR:N/UI:N/S:U/C:N/I:H/A:H",
        kev: false,
        epss: 0.0268,
        fixes: &[fix(UPSTREAM, "4.17.19")],
    },
    Cve {
        id: "CVE-2021-23337",
        product: "lodash",
        title: "lodash command injection via template",
        description: "The template function allows command injection through the variable option.",
        vector: "CVSS:3.1/AV:N/AC:L/PR:H/UI:N/S:U/C:H/I:H/A:H",
        kev: false,
        epss: 0.0142,
        fixes: &[fix(UPSTREAM, "4.17.21")],
    },
    Cve {
        id: "CVE-2020-28500",
        product: "lodash",
        title: "lodash regular expression denial of service in trim functions",
        description: "The toNumber, trim and trimEnd functions are vulnerable to regular expression denial of service.",
        vector: NET_LOW_DOS,
        kev: false,
        epss: 0.0035,
        fixes: &[fix(UPSTREAM, "4.17.21")],
    },
    Cve {
        id: "CVE-2022-25883",
        product: "semver",
        title: "semver regular expression denial of service",
        description: "The new Range function is vulnerable to regular expression denial of service when untrusted user data is passed as a range.",
        vector: NET_DOS,
        kev: false,
        epss: 0.0024,
        fixes: &[fix(UPSTREAM, "5.7.2"), fix_from(UPSTREAM, "6.0.0", "6.3.1"), fix_from(UPSTREAM, "7.0.0", "7.5.2")],
    },
    Cve {
        id: "CVE-2024-37890",
        product: "ws",
        title: "ws denial of service with many HTTP headers",
        description: "A request with a number of headers exceeding server.maxHeadersCount can crash a ws server.",
        vector: NET_DOS,
        kev: false,
        epss: 0.0102,
        fixes: &[fix_from(UPSTREAM, "7.0.0", "7.5.10"), fix_from(UPSTREAM, "8.0.0", "8.17.1")],
    },
    Cve {
        id: "CVE-2023-44487",
        product: "golang-x-net",
        title: "HTTP/2 rapid reset denial of service",
        description: "The HTTP/2 protocol allows a denial of service because request cancellation can reset many streams quickly; exploited in the wild in August to October 2023.",
        vector: NET_DOS,
        kev: true,
        epss: 0.8153,
        fixes: &[fix(UPSTREAM, "v0.17.0")],
    },
    Cve {
        id: "CVE-2022-41723",
        product: "golang-x-net",
        title: "golang.org/x/net HPACK decoder denial of service",
        description: "A maliciously crafted HTTP/2 stream can cause excessive CPU consumption in the HPACK decoder.",
        vector: NET_DOS,
        kev: false,
        epss: 0.0035,
        fixes: &[fix(UPSTREAM, "v0.7.0")],
    },
];

// ---------------------------------------------------------------------------
// Non-CVE checks
// ---------------------------------------------------------------------------

/// Which endpoints a check runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Audience {
    Any,
    Workstations,
    Servers,
}

/// A finding without a CVE: end-of-life software, a non-compliant setting,
/// a licensing problem, or a deviation from the standard software set.
pub struct Check {
    /// Stable check identifier, used in scanner finding ids.
    pub id: &'static str,
    pub finding_type: &'static str,
    pub severity: Severity,
    pub title: &'static str,
    pub description: &'static str,
    pub families: &'static [Family],
    /// OS release keys it is limited to (empty: any release).
    pub releases: &'static [&'static str],
    pub audience: Audience,
    /// Only raised when this product is installed.
    pub requires_product: Option<&'static str>,
    pub subject_type: &'static str,
    /// `None`: the operating system's vendor.
    pub vendor: Option<&'static str>,
    pub product: &'static str,
    /// `None`: the operating system's version (a setting of the OS).
    pub version: Option<&'static str>,
    pub cpe: Option<&'static str>,
    pub fixed_version: Option<&'static str>,
    /// A configuration change (a remediation target) can fix it.
    pub remediable: bool,
}

const fn check(
    id: &'static str,
    finding_type: &'static str,
    severity: Severity,
    title: &'static str,
    description: &'static str,
    families: &'static [Family],
    audience: Audience,
) -> Check {
    Check {
        id,
        finding_type,
        severity,
        title,
        description,
        families,
        releases: &[],
        audience,
        requires_product: None,
        subject_type: "configuration",
        vendor: None,
        product: "",
        version: None,
        cpe: None,
        fixed_version: None,
        remediable: false,
    }
}

pub const CHECKS: &[Check] = &[
    // --- deprecation ---------------------------------------------------------
    Check {
        subject_type: "software",
        vendor: Some("Python Software Foundation"),
        product: "Python",
        version: Some("2.7.18"),
        cpe: Some("cpe:2.3:a:python:python:2.7.18:*:*:*:*:*:*:*"),
        fixed_version: Some("3.12"),
        ..check(
            "ESR-DEP-0001",
            "deprecation",
            Severity::Medium,
            "Python 2.7 is end-of-life",
            "Python 2.7 stopped receiving fixes on 1 January 2020; security issues in the interpreter and standard library are no longer patched.",
            ANY,
            Audience::Any,
        )
    },
    Check {
        subject_type: "software",
        product: "Windows 10",
        releases: &["win10-22h2"],
        fixed_version: Some("Windows 11 23H2"),
        ..check(
            "ESR-DEP-0002",
            "deprecation",
            Severity::Medium,
            "Windows 10 reached end of support",
            "Windows 10 reached end of support on 14 October 2025; without Extended Security Updates the device no longer receives security fixes.",
            WIN,
            Audience::Workstations,
        )
    },
    Check {
        subject_type: "software",
        product: "macOS Ventura",
        releases: &["ventura"],
        fixed_version: Some("15.7"),
        ..check(
            "ESR-DEP-0003",
            "deprecation",
            Severity::Medium,
            "macOS Ventura no longer receives security updates",
            "Apple ships security fixes for the current macOS release and the two before it; Ventura is out of that window.",
            MAC,
            Audience::Workstations,
        )
    },
    Check {
        subject_type: "software",
        vendor: Some("OpenJS Foundation"),
        product: "Node.js",
        version: Some("16.20.2"),
        cpe: Some("cpe:2.3:a:nodejs:node.js:16.20.2:*:*:*:-:*:*:*"),
        fixed_version: Some("22.11.0"),
        ..check(
            "ESR-DEP-0004",
            "deprecation",
            Severity::Low,
            "Node.js 16 is end-of-life",
            "Node.js 16 reached end-of-life on 11 September 2023 and no longer receives security releases.",
            UNIX,
            Audience::Any,
        )
    },
    Check {
        subject_type: "software",
        vendor: Some("OpenSSL"),
        product: "OpenSSL",
        version: Some("1.0.2k-fips"),
        cpe: Some("cpe:2.3:a:openssl:openssl:1.0.2k:*:*:*:*:*:*:*"),
        releases: &["amzn-2"],
        fixed_version: Some("3.0"),
        ..check(
            "ESR-DEP-0005",
            "deprecation",
            Severity::Medium,
            "OpenSSL 1.0.2 is end-of-life",
            "The OpenSSL 1.0.2 series is out of public support; fixes come only from the distribution vendor until it is retired.",
            LINUX,
            Audience::Servers,
        )
    },
    // --- compliance ----------------------------------------------------------
    Check {
        product: "FileVault",
        remediable: true,
        ..check(
            "ESR-CMP-0001",
            "compliance",
            Severity::Medium,
            "Disk encryption disabled",
            "FileVault is off: data on a lost or stolen laptop can be read without the user's password.",
            MAC,
            Audience::Workstations,
        )
    },
    Check {
        product: "BitLocker",
        remediable: true,
        ..check(
            "ESR-CMP-0002",
            "compliance",
            Severity::Medium,
            "Disk encryption disabled",
            "BitLocker is not protecting the system volume: data on a lost or stolen device can be read offline.",
            WIN,
            Audience::Workstations,
        )
    },
    Check {
        product: "Screen Lock",
        remediable: true,
        ..check(
            "ESR-CMP-0003",
            "compliance",
            Severity::Low,
            "Screen lock timeout exceeds 15 minutes",
            "The screen does not lock after 15 minutes of inactivity, as the workstation baseline requires.",
            MAC,
            Audience::Workstations,
        )
    },
    Check {
        product: "Interactive logon: Machine inactivity limit",
        remediable: true,
        ..check(
            "ESR-CMP-0004",
            "compliance",
            Severity::Low,
            "Screen lock timeout exceeds 15 minutes",
            "The machine inactivity limit is unset or above 900 seconds, as the workstation baseline forbids.",
            WIN,
            Audience::Workstations,
        )
    },
    Check {
        product: "Application Firewall",
        remediable: true,
        ..check(
            "ESR-CMP-0005",
            "compliance",
            Severity::Medium,
            "Host firewall disabled",
            "The macOS application firewall is turned off.",
            MAC,
            Audience::Workstations,
        )
    },
    Check {
        product: "Windows Defender Firewall",
        remediable: true,
        ..check(
            "ESR-CMP-0006",
            "compliance",
            Severity::Medium,
            "Host firewall disabled",
            "Windows Defender Firewall is off for the domain or private profile.",
            WIN,
            Audience::Any,
        )
    },
    Check {
        product: "SMB 1.0/CIFS File Sharing Support",
        remediable: true,
        ..check(
            "ESR-CMP-0007",
            "compliance",
            Severity::Medium,
            "SMBv1 protocol enabled",
            "The SMBv1 protocol is enabled; it lacks modern protections and was the vector of WannaCry and NotPetya.",
            WIN,
            Audience::Any,
        )
    },
    Check {
        product: "Remote Desktop Services",
        remediable: true,
        ..check(
            "ESR-CMP-0008",
            "compliance",
            Severity::Medium,
            "Remote Desktop allows connections without Network Level Authentication",
            "RDP accepts sessions before the user authenticates, exposing the logon screen and the RDP stack to unauthenticated attackers.",
            WIN,
            Audience::Servers,
        )
    },
    Check {
        vendor: Some("OpenBSD"),
        product: "sshd_config",
        remediable: true,
        ..check(
            "ESR-CMP-0009",
            "compliance",
            Severity::Medium,
            "SSH permits root login",
            "PermitRootLogin is not set to 'no' in sshd_config.",
            LINUX,
            Audience::Any,
        )
    },
    Check {
        vendor: Some("OpenBSD"),
        product: "sshd_config",
        remediable: true,
        ..check(
            "ESR-CMP-0010",
            "compliance",
            Severity::Low,
            "SSH password authentication enabled",
            "PasswordAuthentication is enabled; the server baseline requires key-based authentication only.",
            LINUX,
            Audience::Servers,
        )
    },
    Check {
        product: "auditd",
        ..check(
            "ESR-CMP-0011",
            "compliance",
            Severity::Low,
            "Audit daemon not running",
            "auditd is not running, so privileged commands and logins are not recorded locally.",
            LINUX,
            Audience::Servers,
        )
    },
    Check {
        product: "Gatekeeper",
        remediable: true,
        ..check(
            "ESR-CMP-0012",
            "compliance",
            Severity::Medium,
            "Gatekeeper disabled",
            "Gatekeeper is disabled, so unsigned and unnotarized applications run without a warning.",
            MAC,
            Audience::Workstations,
        )
    },
    Check {
        product: "Software Update",
        remediable: true,
        ..check(
            "ESR-CMP-0013",
            "compliance",
            Severity::Low,
            "Automatic security updates disabled",
            "Automatic installation of security responses and system files is turned off.",
            MAC,
            Audience::Workstations,
        )
    },
    Check {
        product: "Guest account",
        remediable: true,
        ..check(
            "ESR-CMP-0014",
            "compliance",
            Severity::Low,
            "Guest account enabled",
            "The built-in Guest account is enabled.",
            WIN,
            Audience::Workstations,
        )
    },
    Check {
        product: "unattended-upgrades",
        releases: &["ubuntu-22.04", "ubuntu-24.04", "debian-12"],
        remediable: true,
        ..check(
            "ESR-CMP-0015",
            "compliance",
            Severity::Low,
            "Unattended security upgrades disabled",
            "unattended-upgrades is not installed or not enabled, so security updates wait for manual patching.",
            LINUX,
            Audience::Any,
        )
    },
    // --- licensing -----------------------------------------------------------
    Check {
        subject_type: "software",
        vendor: Some("RARLAB"),
        product: "WinRAR",
        version: Some("6.24"),
        requires_product: Some("winrar"),
        ..check(
            "ESR-LIC-0001",
            "licensing",
            Severity::Low,
            "WinRAR used beyond its evaluation period without a license",
            "WinRAR is shareware; commercial use after the 40-day trial requires a license.",
            WIN,
            Audience::Workstations,
        )
    },
    Check {
        subject_type: "software",
        vendor: Some("Oracle"),
        product: "Java SE",
        version: Some("1.8.0_361"),
        cpe: Some("cpe:2.3:a:oracle:jdk:1.8.0:update361:*:*:*:*:*:*"),
        ..check(
            "ESR-LIC-0002",
            "licensing",
            Severity::Medium,
            "Oracle Java SE requires a commercial subscription",
            "Oracle Java SE 8 updates after 8u202 are licensed for commercial use only with a Java SE Universal Subscription.",
            &[Family::Windows, Family::Linux],
            Audience::Any,
        )
    },
    Check {
        subject_type: "software",
        vendor: Some("Docker"),
        product: "Docker Desktop",
        version: Some("4.34.2"),
        ..check(
            "ESR-LIC-0003",
            "licensing",
            Severity::Info,
            "Docker Desktop requires a paid subscription",
            "Docker Desktop is free only for small businesses; this organization needs a Pro, Team or Business seat for each user.",
            &[Family::MacOs, Family::Windows],
            Audience::Workstations,
        )
    },
    Check {
        subject_type: "software",
        vendor: Some("Microsoft"),
        product: "Visio Professional",
        version: Some("16.0.17328.20184"),
        ..check(
            "ESR-LIC-0004",
            "licensing",
            Severity::Low,
            "Microsoft Visio installed without an assigned license",
            "Visio is installed but the user has no Visio Plan license assigned.",
            WIN,
            Audience::Workstations,
        )
    },
    Check {
        subject_type: "software",
        vendor: Some("Apryse"),
        product: "iText",
        version: Some("7.2.5"),
        ..check(
            "ESR-LIC-0005",
            "licensing",
            Severity::Info,
            "AGPL-3.0 licensed component in a distributed application",
            "iText Core is AGPL-3.0 licensed; distributing an application that links it requires a commercial license or releasing the source.",
            UNIX,
            Audience::Any,
        )
    },
    // --- standardization -----------------------------------------------------
    Check {
        subject_type: "software",
        vendor: Some("Opera Norway"),
        product: "Opera",
        version: Some("114.0.5282.102"),
        ..check(
            "ESR-STD-0001",
            "standardization",
            Severity::Low,
            "Unapproved browser installed",
            "Opera is not on the list of approved browsers (Chrome, Edge, Firefox) and is not centrally managed.",
            &[Family::MacOs, Family::Windows],
            Audience::Workstations,
        )
    },
    Check {
        subject_type: "software",
        vendor: Some("TeamViewer Germany"),
        product: "TeamViewer",
        version: Some("15.44.5"),
        ..check(
            "ESR-STD-0002",
            "standardization",
            Severity::Medium,
            "Non-standard remote access tool installed",
            "TeamViewer is installed; remote access must go through the approved, audited remote support tool.",
            &[Family::MacOs, Family::Windows],
            Audience::Any,
        )
    },
    Check {
        subject_type: "software",
        vendor: Some("Oracle"),
        product: "Java SE",
        version: Some("1.8.0_202"),
        ..check(
            "ESR-STD-0003",
            "standardization",
            Severity::Info,
            "Multiple Java runtime versions installed",
            "More than one Java runtime is installed; the standard build has exactly one, centrally updated.",
            &[Family::Windows, Family::Linux],
            Audience::Any,
        )
    },
    Check {
        product: "Hostname",
        ..check(
            "ESR-STD-0004",
            "standardization",
            Severity::Info,
            "Hostname does not follow the naming convention",
            "The hostname does not match the organization's naming convention for its device type.",
            ANY,
            Audience::Any,
        )
    },
    Check {
        product: "chrony",
        ..check(
            "ESR-STD-0005",
            "standardization",
            Severity::Info,
            "Non-standard time servers configured",
            "The time service does not use the organization's NTP servers.",
            LINUX,
            Audience::Servers,
        )
    },
];

// ---------------------------------------------------------------------------
// The organization's standing remediation scopes
// ---------------------------------------------------------------------------

pub struct ScopeTemplate {
    pub name: &'static str,
    pub description: Option<&'static str>,
    pub status: &'static str,
    /// Every organization has it (others are drawn per seed).
    pub always: bool,
    pub subject_types: &'static [&'static str],
    pub vendors: &'static [&'static str],
    pub products: &'static [&'static str],
    pub cpe_patterns: &'static [&'static str],
    pub os_families: &'static [&'static str],
    pub has_agent: Option<bool>,
    pub tags: &'static [&'static str],
    pub finding_types: &'static [&'static str],
    pub min_severity: Option<Severity>,
    pub min_cvss_score: Option<f64>,
    pub kev_only: bool,
    /// Days to fix: critical, high, medium, low.
    pub sla_days: [u32; 4],
}

const NO_FILTER: ScopeTemplate = ScopeTemplate {
    name: "",
    description: None,
    status: "active",
    always: false,
    subject_types: &[],
    vendors: &[],
    products: &[],
    cpe_patterns: &[],
    os_families: &[],
    has_agent: None,
    tags: &[],
    finding_types: &[],
    min_severity: None,
    min_cvss_score: None,
    kev_only: false,
    sla_days: [7, 30, 90, 180],
};

pub const SCOPE_TEMPLATES: &[ScopeTemplate] = &[
    ScopeTemplate {
        name: "KEV: fix within 7 days",
        description: Some("Anything listed in CISA's Known Exploited Vulnerabilities catalogue, on any endpoint."),
        always: true,
        finding_types: &["vulnerability"],
        kev_only: true,
        sla_days: [7, 7, 7, 7],
        ..NO_FILTER
    },
    ScopeTemplate {
        name: "Critical browser vulnerabilities",
        description: Some("High and critical CVEs in the approved browsers on managed endpoints."),
        always: true,
        subject_types: &["software"],
        products: &["Google Chrome", "Mozilla Firefox", "Microsoft Edge"],
        cpe_patterns: &[
            "cpe:2.3:a:google:chrome:*",
            "cpe:2.3:a:mozilla:firefox:*",
            "cpe:2.3:a:microsoft:edge_chromium:*",
        ],
        has_agent: Some(true),
        finding_types: &["vulnerability"],
        min_severity: Some(Severity::High),
        sla_days: [3, 14, 30, 90],
        ..NO_FILTER
    },
    ScopeTemplate {
        name: "Linux server kernel patches",
        description: Some("Kernel updates for Linux servers; reboots happen in each server's maintenance window."),
        always: true,
        subject_types: &["software"],
        vendors: &["Linux"],
        products: &["Linux kernel"],
        os_families: &["linux"],
        has_agent: Some(true),
        tags: &["server"],
        finding_types: &["vulnerability"],
        min_severity: Some(Severity::Medium),
        sla_days: [14, 30, 60, 120],
        ..NO_FILTER
    },
    ScopeTemplate {
        name: "Workstation compliance baseline",
        description: Some("CIS-aligned settings for laptops and desktops: disk encryption, screen lock, firewall."),
        always: true,
        subject_types: &["configuration"],
        os_families: &["macos", "windows"],
        has_agent: Some(true),
        tags: &["laptop", "desktop"],
        finding_types: &["compliance"],
        sla_days: [14, 30, 45, 90],
        ..NO_FILTER
    },
    ScopeTemplate {
        name: "Third-party application updates",
        description: None,
        status: "paused",
        always: true,
        subject_types: &["software"],
        vendors: &["Adobe", "RARLAB", "Igor Pavlov", "Simon Tatham", "Mozilla", "Google"],
        os_families: &["windows", "macos"],
        has_agent: Some(true),
        finding_types: &["vulnerability"],
        min_cvss_score: Some(4.0),
        sla_days: [14, 30, 90, 180],
        ..NO_FILTER
    },
    ScopeTemplate {
        name: "Windows 10 end-of-support migration",
        description: Some(
            "Tracked Windows 10 devices until their upgrade to Windows 11 (support ended 14 October 2025).",
        ),
        status: "archived",
        always: true,
        subject_types: &["software"],
        vendors: &["Microsoft"],
        products: &["Windows 10"],
        os_families: &["windows"],
        finding_types: &["deprecation"],
        sla_days: [30, 60, 90, 120],
        ..NO_FILTER
    },
    ScopeTemplate {
        name: "Open-source libraries on servers",
        description: Some("Vulnerable Java, Python, Node.js and Go libraries bundled in server applications."),
        subject_types: &["software"],
        products: &[
            "Log4j",
            "Spring Framework",
            "urllib3",
            "Requests",
            "lodash",
            "semver",
            "ws",
            "golang.org/x/net",
            "OpenSSL",
        ],
        os_families: &["linux", "windows"],
        tags: &["server"],
        finding_types: &["vulnerability"],
        min_cvss_score: Some(7.0),
        sla_days: [7, 30, 90, 180],
        ..NO_FILTER
    },
    ScopeTemplate {
        name: "Windows monthly OS updates",
        description: Some("Cumulative updates for Windows workstations and servers."),
        subject_types: &["software"],
        vendors: &["Microsoft"],
        products: &[
            "Windows 11 Version 24H2",
            "Windows 11 Version 23H2",
            "Windows 11 Version 22H2",
            "Windows 10 Version 22H2",
            "Windows Server 2022",
            "Windows Server 2019",
        ],
        os_families: &["windows"],
        has_agent: Some(true),
        finding_types: &["vulnerability"],
        min_severity: Some(Severity::Medium),
        sla_days: [14, 30, 60, 90],
        ..NO_FILTER
    },
    ScopeTemplate {
        name: "SSH service hardening",
        description: Some("OpenSSH updates and sshd configuration on Linux hosts."),
        status: "paused",
        subject_types: &["service", "configuration"],
        vendors: &["OpenBSD"],
        os_families: &["linux"],
        finding_types: &["vulnerability", "compliance"],
        sla_days: [7, 30, 60, 90],
        ..NO_FILTER
    },
    ScopeTemplate {
        name: "Log4Shell emergency response",
        description: Some("December 2021 Log4j response; superseded by the open-source libraries scope."),
        status: "archived",
        cpe_patterns: &["cpe:2.3:a:apache:log4j:*"],
        finding_types: &["vulnerability"],
        sla_days: [2, 7, 30, 90],
        ..NO_FILTER
    },
];

// ---------------------------------------------------------------------------
// People, places and names
// ---------------------------------------------------------------------------

pub const FIRST_NAMES: &[&str] = &[
    "Aisha", "Alex", "Amelia", "Andrei", "Ana", "Ben", "Carlos", "Chen", "Chloe", "Daniel", "Diego", "Elena", "Emma",
    "Fatima", "Felix", "Grace", "Hannah", "Hiro", "Isabel", "Jamal", "Jane", "Jonas", "Julia", "Kai", "Laura", "Leila",
    "Liam", "Lucas", "Maya", "Mei", "Mohammed", "Nadia", "Noah", "Olivia", "Omar", "Priya", "Rafael", "Sara", "Sofia",
    "Tom", "Wei", "Yusuf", "Zoe",
];

pub const LAST_NAMES: &[&str] = &[
    "Adams", "Ahmed", "Bauer", "Becker", "Brown", "Costa", "Diaz", "Doe", "Evans", "Fischer", "Garcia", "Gomez",
    "Hansen", "Hughes", "Ivanova", "Jensen", "Kaur", "Kim", "Kowalski", "Larsen", "Lee", "Lopez", "Martin", "Meyer",
    "Moreau", "Nakamura", "Nguyen", "Novak", "Okafor", "Patel", "Perez", "Rossi", "Santos", "Schmidt", "Silva",
    "Singh", "Smith", "Tanaka", "Walker", "Wang", "Weber", "Williams", "Zhang",
];

/// Workstation owners' departments (tag values) and their weights.
pub const DEPARTMENTS: &[(&str, u32)] = &[
    ("engineering", 35),
    ("sales", 12),
    ("support", 10),
    ("it", 8),
    ("finance", 8),
    ("marketing", 8),
    ("design", 7),
    ("hr", 5),
    ("legal", 4),
];

/// Team mailboxes that own some servers.
pub const SERVER_TEAMS: &[(&str, &str)] = &[
    ("Platform Engineering", "platform-eng"),
    ("Database Operations", "dba"),
    ("IT Infrastructure", "it-infra"),
    ("Site Reliability", "sre"),
];

pub const ENVIRONMENTS: &[(&str, u32)] = &[("prod", 50), ("staging", 25), ("dev", 25)];

/// Linux server roles: hostname stem and tag.
pub const LINUX_SERVER_ROLES: &[(&str, u32)] = &[
    ("web", 20),
    ("api", 18),
    ("k8s-node", 15),
    ("db", 12),
    ("batch", 8),
    ("ci", 8),
    ("cache", 7),
    ("queue", 6),
    ("bastion", 3),
    ("monitoring", 3),
];

/// Windows server roles: hostname code, tag, weight.
pub const WINDOWS_SERVER_ROLES: &[(&str, &str, u32)] = &[
    ("DC", "domain-controller", 15),
    ("SQL", "sql-server", 25),
    ("FS", "file-server", 15),
    ("IIS", "web", 20),
    ("RDS", "remote-desktop", 10),
    ("APP", "app-server", 15),
];

/// In-house services whose directories hold bundled libraries.
pub const SERVICE_APPS: &[&str] = &[
    "billing-api",
    "inventory-service",
    "reporting-worker",
    "auth-gateway",
    "etl-runner",
    "search-indexer",
    "notification-service",
    "payments-batch",
    "customer-portal",
    "data-exporter",
    "metrics-collector",
    "scheduler",
    "order-service",
    "pricing-engine",
    "ledger-sync",
    "document-renderer",
    "email-relay",
    "audit-trail",
    "feature-flags",
    "image-resizer",
];

/// Line-of-business desktop applications that ship their own libraries.
pub const DESKTOP_APPS: &[&str] = &[
    "Expense Reporter",
    "Timesheet Client",
    "Report Viewer",
    "Label Printer Bridge",
    "Data Loader",
    "Contract Manager",
    "Sales Dashboard",
    "Survey Studio",
    "Ticket Desk",
    "Floor Planner",
    "Asset Scanner",
    "Payroll Export",
];

/// Organizationally unique identifiers (first three MAC bytes) by hardware.
pub const APPLE_OUIS: &[&str] = &["a4:83:e7", "f0:18:98", "3c:22:fb", "bc:d0:74", "14:7d:da"];
pub const PC_OUIS: &[&str] = &["d4:81:d7", "f8:bc:12", "54:bf:64", "54:ee:75", "8c:16:45", "98:fa:9b", "3c:52:82"];
pub const VIRTUAL_OUIS: &[&str] = &["00:50:56", "00:15:5d", "52:54:00"];

pub const AGENT_VERSIONS: &[(&str, u32)] =
    &[("4.13.0", 25), ("4.12.3", 40), ("4.12.1", 15), ("4.11.7", 12), ("4.10.2", 8)];

/// Vulnerability scanners in use, by OS family.
pub fn scanners(family: Family) -> &'static [(&'static str, u32)] {
    match family {
        Family::MacOs => &[("crowdstrike", 40), ("tenable", 30), ("qualys", 30)],
        Family::Windows => &[("defender", 40), ("crowdstrike", 25), ("qualys", 20), ("tenable", 15)],
        Family::Linux => &[("trivy", 35), ("qualys", 25), ("tenable", 25), ("crowdstrike", 15)],
    }
}

pub const SUPPRESSION_NOTES: &[(&str, &[&str])] = &[
    (
        "accepted_risk",
        &[
            "Line-of-business application depends on this version; risk accepted by the CISO until its replacement ships.",
            "Isolated lab machine with no inbound network access; risk accepted.",
            "Vendor-certified build; upgrading would void support. Re-evaluate at the next maintenance contract.",
        ],
    ),
    (
        "false_positive",
        &[
            "Scanner matched the version string only; the vulnerable code path is patched in the distribution build.",
            "Component is present on disk but never loaded; confirmed by the application owner.",
        ],
    ),
    (
        "compensating_control",
        &[
            "Mitigated by EDR exploit protection and blocked at the perimeter firewall.",
            "Outbound SMB (TCP 445) is blocked at the egress firewall.",
            "Service only listens on the management VLAN behind the bastion host.",
        ],
    ),
];

pub const FAILED_EXECUTION_ERRORS: &[&str] = &[
    "Installer exited with code 1603 (fatal error during installation)",
    "Package download failed: HTTP 404 from the configured mirror",
    "Timed out after 1800 s waiting for the installer to finish",
    "dpkg: error processing package (--configure): dependency problems - leaving unconfigured",
    "The application was running and its files could not be replaced",
    "Not enough free space on the system volume (1.2 GB required)",
];

pub const PREFLIGHT_ERRORS: &[&str] = &[
    "Preflight: a reboot from a previous update is pending",
    "Preflight: the package manager lock is held by another process",
    "Preflight: installed version differs from the inventory; rescan required",
    "Preflight: the device is on battery power below 20%",
];

pub const SERVER_BLOCKED_ERRORS: &[&str] = &[
    "Blocked: outside the endpoint's maintenance window",
    "Blocked: change freeze in effect for production servers",
    "Blocked: the endpoint's agent has not checked in for more than 7 days",
];

pub const WORKSTATION_BLOCKED_ERRORS: &[&str] = &[
    "Blocked: the user deferred the update (3 of 3 deferrals used)",
    "Blocked: the application is in use and the user declined to close it",
    "Blocked: the endpoint's agent has not checked in for more than 7 days",
];

pub const NO_AGENT_ERROR: &str = "Blocked: no agent is enrolled on the endpoint";

pub const NOT_FIXED_ERROR: &str = "Verification scan still reports the vulnerable version";
