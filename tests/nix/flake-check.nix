# What `nix flake check --all-systems --no-build` asserts about a flake's outputs, written out in
# Nix so that Debian's nix 2.8 (whose own `flake check` predates these rules) applies the rules of
# today's Nix. Rule for rule from NixOS/nix src/nix/flake.cc, CmdFlakeCheck::run (read at commit
# 003b64476e3bb3cb8159512fbdb612425d3c088a): checkSystemName, checkDerivation, checkApp,
# checkOverlay, checkModule, checkNixOSConfiguration and the list of known outputs.
#
# Returns { errors = [ "..." ]; warnings = [ "..." ]; }, each message worded as Nix words it.
# Where Nix's check cannot be said in the Nix language it is approximated, and says so:
#   - checkDerivation also queries the drvPath (instantiates); here: `type == "derivation"`.
#   - checkOverlay wants a lambda whose argument is named `final`, without formals; Nix code can
#     see a lambda and that it has no named formals, not the argument's name.
outputs:
let
  inherit (builtins) attrNames concatLists concatMap filter isAttrs isFunction isPath isString
    hasContext mapAttrs tryEval;
  # errors of one kind of output, per (system,) attribute
  each = set: f: concatLists (map (name: f name set.${name}) (attrNames set));
  validSystem = name: builtins.match ".*-.*" name != null;
  systemError = out: sys: if validSystem sys then [ ] else [ "'${sys}' is not a valid system type, at ${out}.${sys}" ];
  isDerivation = v: isAttrs v && (v.type or null) == "derivation";
  checkDerivation = path: v:
    if isDerivation v then [ ] else [ "flake attribute '${path}' is not a derivation" ];
  noCtxString = v: isString v && !hasContext v;
  checkApp = path: v:
    if !isAttrs v then [ "app '${path}': value is ${builtins.typeOf v} while a set was expected" ]
    else
      (if !(v ? type) then [ "app '${path}' lacks attribute 'type'" ]
       else if !noCtxString v.type then [ "app '${path}': type is not a string without context" ]
       else [ ])
      ++ (if !(v ? program) then [ "app '${path}' lacks attribute 'program'" ]
          else if !isString v.program then [ "app '${path}': program is ${builtins.typeOf v.program} while a string was expected" ]
          else [ ])
      ++ (if v ? meta && !(isAttrs v.meta) then [ "app '${path}': meta is not a set" ]
          else if v ? meta && v.meta ? description && !noCtxString v.meta.description
          then [ "app '${path}': meta.description is not a string without context" ] else [ ])
      ++ map (name: "app '${path}' has unsupported attribute '${name}'")
        (filter (name: name != "type" && name != "program" && name != "meta") (attrNames v));
  appWarnings = path: v:
    if !isAttrs v then [ ]
    else if !(v ? meta) then [ "app '${path}' lacks attribute 'meta'" ]
    else if isAttrs v.meta && !(v.meta ? description) then [ "app '${path}' lacks attribute 'meta.description'" ]
    else [ ];
  checkOverlay = path: v:
    if !isFunction v then [ "overlay '${path}' is not a function, but ${builtins.typeOf v} instead" ]
    else if builtins.functionArgs v != { } then [ "overlay '${path}' does not take an argument named 'final'" ]
    else [ ];
  # Nix forces the value (a path, function or set: what the module system imports)
  checkModule = path: v:
    if (tryEval (builtins.seq v true)).success && (isPath v || isFunction v || isAttrs v || isString v) then [ ]
    else [ "NixOS module '${path}' does not evaluate to a module" ];
  checkNixOSConfiguration = path: v:
    let top = tryEval (v.config.system.build.toplevel or null); in
    if top.success && isDerivation top.value then [ ]
    else [ "NixOS configuration '${path}': attribute 'config.system.build.toplevel' is not a derivation" ];
  perSystem = out: f: each outputs.${out} (sys: set: systemError out sys ++ f sys set);
  perSystemAttr = out: check: perSystem out (sys: set: each set (name: check "${out}.${sys}.${name}"));
  known = [
    "checks" "formatter" "packages" "devShells" "apps" "defaultPackage" "devShell" "defaultApp"
    "legacyPackages" "overlay" "overlays" "nixosModule" "nixosModules" "nixosConfigurations"
    "hydraJobs" "defaultTemplate" "templates" "defaultBundler" "bundlers" "lib"
    "darwinConfigurations" "darwinModules" "flakeModule" "flakeModules" "herculesCI"
    "homeConfigurations" "homeModule" "homeModules" "nixopsConfigurations"
  ];
  has = name: outputs ? ${name};
  errors =
    (if has "checks" then perSystemAttr "checks" checkDerivation else [ ])
    ++ (if has "packages" then perSystemAttr "packages" checkDerivation else [ ])
    ++ (if has "devShells" then perSystemAttr "devShells" checkDerivation else [ ])
    ++ (if has "formatter" then perSystem "formatter" (sys: v: checkDerivation "formatter.${sys}" v) else [ ])
    ++ (if has "apps" then perSystemAttr "apps" checkApp else [ ])
    ++ (if has "overlays" then each outputs.overlays (name: checkOverlay "overlays.${name}") else [ ])
    ++ (if has "nixosModules" then each outputs.nixosModules (name: checkModule "nixosModules.${name}") else [ ])
    ++ (if has "nixosConfigurations"
        then each outputs.nixosConfigurations (name: checkNixOSConfiguration "nixosConfigurations.${name}")
        else [ ]);
  warnings =
    (if has "apps" then perSystemAttr "apps" appWarnings else [ ])
    ++ map (name: "unknown flake output '${name}'")
      (filter (name: !builtins.elem name known) (attrNames outputs));
in
{ inherit errors warnings; }
