// A program built only against the installed rdmacoll: one-rank world over tcp://.
#include <iostream>

#include <rdmacoll/rdmacoll.hpp>

int main(int argc, char** argv) {
  rdmacoll::InitOptions opt;
  opt.init_method = std::string("tcp://127.0.0.1:") + (argc > 1 ? argv[1] : "29555");
  opt.rank = 0;
  opt.world_size = 1;
  rdmacoll::init_process_group(opt);
  rdmacoll::Tensor in = rdmacoll::tensor({4, 5});
  rdmacoll::Tensor out = rdmacoll::zeros({2});
  rdmacoll::all_gather_into_tensor(out, in);
  std::cout << out << std::endl;
  rdmacoll::destroy_process_group();
  return out.item(0) == 4 && out.item(1) == 5 ? 0 : 1;
}
