// test_tile_route.cpp — the many-row tile kernel's routing decisions (cuda_int_tiles_route.cuh) on the CPU,
// for tests/kernels/test_tile_routing.py. Reads one query a line from stdin and answers one line each:
//   choose ROUTING FORCED ROWS N_OUT K DTYPE SMS TAIL_MOST  ->  CHOICE SHAPE NO ROWS_OF_SHAPE  (or -1)
//   tail ROWS N_OUT K DTYPE SMS TAIL_MOST ROUTING  ->  what launch_int_matmul's tail split does with the routed
//        call: HEAD_ROWS HEAD_SHAPE TAIL_ROWS TAIL_SHAPE (TAIL_SHAPE -1: off the tiles; TAIL_ROWS 0: no split)
// The tail query follows launch_int_matmul (cuda_int_matmul.cu): the tail's route is its own call's, and a
// tail of at most kGemvMaxRows rows that the tiles do not take counts as off the tiles (the gemv kernel).
#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>

#include "cuda_int_tiles_route.cuh"

namespace R = strata::cuda::tile_route;

int main() {
    std::string line;
    while (std::getline(std::cin, line)) {
        std::istringstream in(line);
        std::string what;
        in >> what;
        if (what == "choose") {
            int routing = 0, forced = 0, dtype = 0, sms = 0;
            long long rows = 0, n_out = 0, k = 0, most = 0;
            in >> routing >> forced >> rows >> n_out >> k >> dtype >> sms >> most;
            R::Knobs kn;
            kn.tail_most = most;
            const int c = R::choose(routing, forced != 0, rows, n_out, k, dtype, sms, kn);
            if (c < 0) std::printf("-1\n");
            else std::printf("%d %d %d %d\n", c, R::choice_shape(c), R::shape_no(R::choice_shape(c)),
                             R::shape_rows(R::choice_shape(c)));
        } else if (what == "tail") {
            int dtype = 0, sms = 0, routing = 0;
            long long rows = 0, n_out = 0, k = 0, most = 0;
            in >> rows >> n_out >> k >> dtype >> sms >> most >> routing;
            R::Knobs kn;
            kn.tail_most = most;
            const int c = R::choose(routing, false, rows, n_out, k, dtype, sms, kn);
            long long tail = c < 0 ? 0 : R::tail_rows(c, rows, most);
            int head = c, tc = -1;
            if (tail > 0) {
                head = R::choose(routing, false, rows - tail, n_out, k, dtype, sms, kn);
                tc = R::choose(routing, false, tail, n_out, k, dtype, sms, kn);
                const bool off = tc < 0 && tail <= strata::cuda::kGemvMaxRows;
                if ((tc < 0 && !off) || !R::tail_pays(c, head >= 0 ? head : c, tc, rows, tail, n_out, sms))
                    tail = 0, head = c, tc = -1;
            }
            std::printf("%lld %d %lld %d\n", rows - tail, head < 0 ? -1 : R::choice_shape(head), tail,
                        tc < 0 ? -1 : R::choice_shape(tc));
        } else if (!what.empty()) {
            std::printf("? %s\n", what.c_str());
            return 2;
        }
        std::fflush(stdout);
    }
    return 0;
}
