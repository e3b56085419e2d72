/** \file Options.cpp
 * The enums of Options by name: fusion levels, dump stages, tile pass lists.
 */
#include "driver/Options.h"

#include <sstream>

#include "support/Error.h"
#include "tile/Passes.h"

namespace rf {

namespace {
std::string joined(const std::vector<std::string> &names) {
    std::string out;
    for (const std::string &n : names) out += (out.empty() ? "" : ", ") + n;
    return out;
}

std::vector<std::string> split_commas(const std::string &list) {
    std::vector<std::string> out;
    std::stringstream ss(list);
    for (std::string item; std::getline(ss, item, ',');)
        if (!item.empty()) out.push_back(item);
    return out;
}

}  // namespace

std::vector<std::string> tile_pass_names() {
    std::vector<std::string> names;
    for (const tile::TilePassInfo &p : tile::tile_passes()) names.push_back(p.name);
    return names;
}

std::vector<std::string> parse_tile_pass_list(const std::string &list) {
    std::vector<std::string> valid = tile_pass_names(), out;
    for (const std::string &name : split_commas(list)) {
        bool known = false;
        for (const std::string &v : valid) known = known || v == name;
        if (!known) throw UserError({}, "unknown tile pass '" + name + "' (valid: " + joined(valid) + ")");
        out.push_back(name);
    }
    return out;
}

std::vector<std::string> dump_names() {
    std::vector<std::string> out{"ir", "ir:rates", "graph", "plan", "tile:lowered"};
    for (const std::string &p : tile_pass_names()) out.push_back("tile:after-" + p);
    for (const char *s : {"tile", "cpp", "opencl", "cuda"}) out.push_back(s);
    return out;
}

std::string to_string(const DumpRequest &d) {
    switch (d.stage) {
    case Stage::Ir: return "ir";
    case Stage::IrRates: return "ir:rates";
    case Stage::Graph: return "graph";
    case Stage::Plan: return "plan";
    case Stage::TileLower: return "tile:lowered";
    case Stage::TilePass: return "tile:after-" + d.pass;
    case Stage::Tile: return "tile";
    case Stage::Cpp: return "cpp";
    case Stage::OpenCL: return "opencl";
    case Stage::Cuda: return "cuda";
    }
    return "?";
}

DumpRequest parse_dump(const std::string &name) {
    const std::string after = "tile:after-";
    if (name.rfind(after, 0) == 0) {
        std::string pass = name.substr(after.size());
        for (const std::string &p : tile_pass_names())
            if (p == pass) return {Stage::TilePass, pass};
    }
    for (Stage s : {Stage::Ir, Stage::IrRates, Stage::Graph, Stage::Plan, Stage::TileLower, Stage::Tile, Stage::Cpp, Stage::OpenCL, Stage::Cuda})
        if (name == to_string(DumpRequest{s, ""})) return {s, ""};
    throw UserError({}, "unknown stage '" + name + "' (valid: " + joined(dump_names()) + ")");
}

std::vector<DumpRequest> parse_dump_list(const std::string &list) {
    std::vector<DumpRequest> out;
    for (const std::string &item : split_commas(list)) out.push_back(parse_dump(item));
    return out;
}

bool Options::wants_dump(const DumpRequest &d) const {
    for (const DumpRequest &r : dumps)
        if (r == d) return true;
    return false;
}

}  // namespace rf
